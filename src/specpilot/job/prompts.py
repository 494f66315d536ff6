"""The job's prompts, read whole once before anything starts: what generate's first listing
would refuse (a file that is not prompts, no usable row, an id given twice) is refused here,
before `up` starts an engine for it.

Streaming, through generate's own reader: each row is parsed and dropped. The ids are kept as
8-byte digests (7 MiB at 902,087 rows, whatever the rows' size), sorted to find a repeat; only
digests seen twice are read again, in a second pass, for the ids they stand for.
"""

from __future__ import annotations

import hashlib
import itertools
from array import array
from collections.abc import Iterator
from pathlib import Path

from specpilot.errors import UserError
from specpilot.generate.rows.inputs import InputSource, iter_rows, resolve_input
from specpilot.generate.rows.types import PromptRow, RejectedRow

FIELD = "[job] prompts"
#: repeated ids a refusal names
SHOWN_IDS = 5


def _digest(row_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(row_id.encode("utf-8", "surrogatepass"), digest_size=8).digest())


def _rows(source: InputSource) -> Iterator[PromptRow | RejectedRow]:
    """generate's reader, its refusals naming the job's key instead of generate's flag; one
    naming the file or a line of it (`prompts.jsonl:1`) keeps that after the key."""
    try:
        yield from iter_rows(source)
    except UserError as err:
        message = err.message if err.field in (None, "--input") else f"{err.field}: {err.message}"
        raise UserError(message, field=FIELD, fix=err.fix) from None


def _repeated(digests: array[int]) -> set[int]:
    ordered = sorted(digests)
    return {a for a, b in itertools.pairwise(ordered) if a == b}


def _repeated_ids(source: InputSource, digests: set[int]) -> list[str]:
    """The ids behind `digests` that more than one row has (a digest shared by two different
    ids is no repeat)."""
    seen: set[str] = set()
    repeated: list[str] = []
    for row in _rows(source):
        if isinstance(row, PromptRow) and _digest(row.row_id) in digests:
            if row.row_id in seen:
                repeated.append(row.row_id)
            seen.add(row.row_id)
    return repeated


def check_prompts(path: Path) -> int:
    """The usable rows of the prompts at `path`; UserError naming [job] prompts when generate
    would refuse them."""
    try:
        source = resolve_input(path)
    except UserError as err:
        raise UserError(err.message, field=FIELD, fix=err.fix) from None
    digests: array[int] = array("Q")
    rejected = 0
    for row in _rows(source):
        if isinstance(row, RejectedRow):
            rejected += 1
        else:
            digests.append(_digest(row.row_id))
    if not digests:
        raise UserError(
            f"{path} has no usable rows ({rejected} rejected)",
            field=FIELD,
            fix="give a file with at least one prompt row (`specpilot generate --help` shows each shape)",
        )
    repeated = _repeated(digests)
    ids = _repeated_ids(source, repeated) if repeated else []
    if ids:
        shown = ", ".join(list(dict.fromkeys(ids))[:SHOWN_IDS])
        raise UserError(
            f"{len(ids)} rows repeat an earlier id (e.g. {shown})",
            field=FIELD,
            fix="make the ids unique (`specpilot generate --dedupe` keeps the first row of each id)",
        )
    return len(digests)
