"""`specpilot export DIR --parquet`: the committed rows of each part as one Parquet shard.

Only the bytes the ledger has committed are read, so exporting while a job runs never
picks up a torn or not-yet-durable row. The schema is fixed (not inferred per shard) so
every shard agrees and `datasets.load_dataset("parquet", data_files=...)` reads them as
one table; non-string message content (e.g. multimodal parts) is stored as JSON text.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specpilot.errors import UserError
from specpilot.generate.ledger import LEDGER_FILE, Ledger
from specpilot.generate.writer import DATA_DIR, list_parts

TURN = pa.struct([("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string())])
META = pa.struct(
    [
        ("model", pa.string()),
        ("thinking", pa.bool_()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("server", pa.string()),
        ("spec_accept_length", pa.float64()),
        ("flags", pa.list_(pa.string())),
    ]
)
SCHEMA = pa.schema([("id", pa.string()), ("conversations", pa.list_(TURN)), ("meta", META)])


@dataclass(frozen=True)
class ExportResult:
    files: list[Path]
    rows: int


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value)


def _record(row: dict[str, Any]) -> dict[str, Any]:
    turns = [
        {
            "role": t.get("role"),
            "content": _text(t.get("content")),
            "reasoning_content": _text(t.get("reasoning_content")),
        }
        for t in row["conversations"]
    ]
    meta = row.get("meta") or {}
    return {"id": row["id"], "conversations": turns, "meta": {name: meta.get(name) for name in META.names}}


def export_parquet(directory: Path, target: Path | None = None) -> ExportResult:
    if not (directory / LEDGER_FILE).exists():
        raise UserError(
            f"{directory} has no {LEDGER_FILE}",
            field="DIR",
            fix="pass the --output directory of a `specpilot generate` job",
        )
    try:
        ledger = Ledger.in_dir(directory, readonly=True)
        try:
            commits = ledger.part_commits()
        finally:
            ledger.close()
    except sqlite3.DatabaseError as err:
        raise UserError(
            f"the ledger {directory / LEDGER_FILE} cannot be read ({err})",
            field="DIR",
            fix="restore the folder from a backup; the rows themselves are in its data/ folder",
        ) from None
    target = target or directory / "parquet"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"cannot make the folder {target}: {err.strerror}",
            field="--to",
            fix="give a folder that does not exist yet or is a folder you can write to",
        ) from None
    files: list[Path] = []
    rows = 0
    for part, path in list_parts(directory / DATA_DIR).items():
        commit = commits.get(part)
        if commit is None or commit.rows == 0:
            continue
        with path.open("rb") as handle:
            data = handle.read(commit.committed_bytes)
        if len(data) < commit.committed_bytes:
            raise UserError(
                f"{path} holds {len(data)} bytes but {commit.committed_bytes} were written to it: it was cut "
                "short or replaced since",
                field="DIR",
                fix="rerun the same `specpilot generate` command (it makes the lost rows again), then export",
            )
        records = [_record(json.loads(line)) for line in data.splitlines() if line]
        out = target / f"{path.stem}.parquet"
        tmp = out.with_name(out.name + ".tmp")
        pq.write_table(pa.Table.from_pylist(records, schema=SCHEMA), tmp)
        tmp.replace(out)
        files.append(out)
        rows += len(records)
    if not files:
        raise UserError(
            f"{directory} has no finished rows yet", field="DIR", fix="run `specpilot generate` into it first"
        )
    return ExportResult(files, rows)
