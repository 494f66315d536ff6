"""Stable row ids for prompts that come without one.

The id must survive a restart and a re-export of the same prompts, so it is derived
from content only: sha256 over canonical JSON (sorted keys, no whitespace, UTF-8) of
the prompt messages, reduced to role and content. 32 hex digits (128 bits) keep ids
short while making an accidental collision in a 10^6-row set vanishingly unlikely.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from specpilot.generate.rows.types import Message

ID_HEX_DIGITS = 32


def canonical_messages_json(messages: Sequence[Message]) -> str:
    """The canonical text hashed for a derived id (role and content of each message)."""
    reduced = [{"role": m.get("role"), "content": m.get("content")} for m in messages]
    return json.dumps(reduced, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def derive_row_id(messages: Sequence[Message]) -> str:
    """Content id of a prompt: the same messages always give the same id."""
    digest = hashlib.sha256(canonical_messages_json(messages).encode("utf-8")).hexdigest()
    return digest[:ID_HEX_DIGITS]
