"""The JSONL formats (SpecForge, speculators): strings never null, `tools` as JSON text (so
every row has one Arrow type when a trainer loads it), written a line at a time."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from specpilot.errors import UserError
from specpilot.export.writing import WriteRequest, Written
from specpilot.generate.rows.output import turn_rows
from specpilot.generate.writers.committed import committed_parts

JSONL_TURN_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")

#: what one stored row becomes in a JSONL export: its records (none: the row is left out)
Records = Callable[[dict[str, Any]], list[dict[str, Any]]]


def json_text(value: Any) -> str | None:
    """A value as text: strings as they are, anything else as JSON."""
    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def jsonl_record(row: dict[str, Any], *, with_status: bool) -> dict[str, Any]:
    """A row as SpecForge / speculators read it: strings never null, tools as JSON text."""
    turns = []
    for turn in row["conversations"]:
        kept = {key: turn[key] for key in JSONL_TURN_KEYS if turn.get(key) is not None}
        kept["content"] = turn.get("content") or ""
        if turn["role"] == "assistant":
            kept["reasoning_content"] = turn.get("reasoning_content") or ""
        turns.append(kept)
    record: dict[str, Any] = {"id": row["id"], "conversations": turns}
    if row.get("tools"):
        record["tools"] = json_text(row["tools"])
    if with_status:
        record["status"] = "success"
    return record


def specforge_records(per_turn: bool) -> Records:
    """SpecForge rows: one per target turn (`rows.turn_rows`), or the whole conversation."""

    def records(row: dict[str, Any]) -> list[dict[str, Any]]:
        if not per_turn:
            return [jsonl_record(row, with_status=True)]
        split = turn_rows(row)
        if not split:
            raise UserError(
                f"row {row['id']!r} has no meta.target_turns: a per-turn export cannot tell which turns "
                "the target wrote",
                field="--per-turn",
                fix="export it with --whole-conversations, or generate it again with this specpilot",
            )
        return [jsonl_record(r, with_status=True) for r in split]

    return records


def speculators_records(row: dict[str, Any]) -> list[dict[str, Any]]:
    """speculators trains every assistant turn of a row (one sample each), so a row with a
    given assistant turn (--keep-given-turns) is left out; the rest keep `target_turns`."""
    targets = (row.get("meta") or {}).get("target_turns") or []
    assistants = [i for i, turn in enumerate(row["conversations"]) if turn["role"] == "assistant"]
    if assistants != targets:
        return []
    return [{**jsonl_record(row, with_status=False), "target_turns": targets}]


def write_specforge(request: WriteRequest) -> Written:
    return _write_jsonl(request, specforge_records(request.per_turn))


def write_speculators(request: WriteRequest) -> Written:
    return _write_jsonl(request, speculators_records)


def _write_jsonl(request: WriteRequest, records: Records) -> Written:
    written = left_out = 0
    with request.target.open("w", encoding="utf-8") as out:
        for _, _, part_rows in committed_parts(request.directory, request.splits):
            for row in part_rows:
                made = records(row)
                left_out += not made
                for record in made:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += len(made)
            request.done(written)
        out.flush()
        os.fsync(out.fileno())
    return Written([request.target] if written else [], written, left_out)
