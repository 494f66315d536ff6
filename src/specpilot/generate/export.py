"""`specpilot export DIR --format specforge|speculators|parquet|hf`: the committed rows for a trainer.

| format | writes | read by |
|---|---|---|
| `specforge` | one JSONL file, `DIR/specforge.jsonl` | SpecForge `train_data_path`, its validation script |
| `speculators` | one JSONL file, `DIR/speculators.jsonl` | speculators `prepare-data` / `load_raw_dataset` |
| `parquet` | one shard per part, `DIR/parquet/` | `datasets.load_dataset("parquet", data_files=...)` |
| `hf` | a `save_to_disk` directory, `DIR/hf/` | `datasets.load_from_disk` |

Only clean rows (`data/`) unless `include_flagged`. The JSONL formats carry strings
only (never null), `tools` as a JSON string (so every row has one Arrow type), and
SpecForge's `"status": "success"`. The Parquet/Arrow schema is fixed (not inferred per
shard) so shards agree; non-string values are stored as JSON text.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specpilot.errors import UserError
from specpilot.generate.committed import committed_parts
from specpilot.generate.writer import CLEAN, FLAGGED, Split

TURN = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning_content", pa.string()),
        ("tool_calls", pa.string()),
        ("tool_call_id", pa.string()),
    ]
)
TURN_META = pa.struct(
    [
        ("index", pa.int64()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("reasoning_tokens", pa.int64()),
        ("answer_tokens", pa.int64()),
        ("tokens_estimated", pa.bool_()),
        ("server", pa.string()),
        ("spec_accept_length", pa.float64()),
        ("flags", pa.list_(pa.string())),
    ]
)
META = pa.struct(
    [
        ("model", pa.string()),
        ("thinking", pa.bool_()),
        ("keep_given_turns", pa.bool_()),
        ("target_turns", pa.list_(pa.int64())),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("reasoning_tokens", pa.int64()),
        ("answer_tokens", pa.int64()),
        ("tokens_estimated", pa.bool_()),
        ("server", pa.string()),
        ("spec_accept_length", pa.float64()),
        ("flags", pa.list_(pa.string())),
        ("turns", pa.list_(TURN_META)),
    ]
)
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("conversations", pa.list_(TURN)),
        ("tools", pa.string()),
        ("status", pa.string()),
        ("meta", META),
    ]
)
JSONL_TURN_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


@dataclass
class ExportResult:
    files: list[Path]
    rows: int
    flagged_included: bool
    chat_template: str | None = None
    warnings: list[str] = field(default_factory=list)


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _arrow_record(row: dict[str, Any]) -> dict[str, Any]:
    turns = [{name: _text(t.get(name)) for name in TURN.names} for t in row["conversations"]]
    meta = row.get("meta") or {}
    return {
        "id": row["id"],
        "conversations": turns,
        "tools": _text(row.get("tools")),
        "status": row.get("status", "success"),
        "meta": {name: meta.get(name) for name in META.names},
    }


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
        record["tools"] = _text(row["tools"])
    if with_status:
        record["status"] = "success"
    return record


#: hears the rows written so far, after each shard
RowsDone = Callable[[int], object]


def _quiet(rows: int) -> None:
    return None


def _make_folder(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"cannot make the folder {path}: {err.strerror}",
            field="--to",
            fix="give a folder that does not exist yet or is a folder you can write to",
        ) from None


def _splits(include_flagged: bool) -> tuple[Split, ...]:
    return (CLEAN, FLAGGED) if include_flagged else (CLEAN,)


def _write_jsonl(
    directory: Path, target: Path, include_flagged: bool, done: RowsDone, with_status: bool
) -> tuple[list[Path], int]:
    if target.is_dir():
        raise UserError(
            f"{target} is a folder", field="--to", fix="give the path of the .jsonl file to write"
        )
    _make_folder(target.parent)
    tmp = target.with_name(target.name + ".tmp")
    rows = 0
    with tmp.open("w", encoding="utf-8") as out:
        for _, part_rows in committed_parts(directory, _splits(include_flagged)):
            for row in part_rows:
                out.write(json.dumps(jsonl_record(row, with_status=with_status), ensure_ascii=False) + "\n")
            rows += len(part_rows)
            done(rows)
        out.flush()
        os.fsync(out.fileno())
    if not rows:
        tmp.unlink()
        return [], 0
    tmp.replace(target)
    return [target], rows


def _tables(directory: Path, include_flagged: bool, done: RowsDone) -> Iterator[tuple[Path, pa.Table]]:
    rows = 0
    for path, part_rows in committed_parts(directory, _splits(include_flagged)):
        records = [_arrow_record(row) for row in part_rows]
        yield path, pa.Table.from_pylist(records, schema=SCHEMA)
        rows += len(part_rows)
        done(rows)


def _write_parquet(
    directory: Path, target: Path, include_flagged: bool, done: RowsDone
) -> tuple[list[Path], int]:
    _make_folder(target)
    files: list[Path] = []
    rows = 0
    for path, table in _tables(directory, include_flagged, done):
        out = target / f"{path.parent.name}-{path.stem}.parquet"
        tmp = out.with_name(out.name + ".tmp")
        pq.write_table(table, tmp)
        tmp.replace(out)
        files.append(out)
        rows += table.num_rows
    return files, rows


def _write_hf(directory: Path, target: Path, include_flagged: bool, done: RowsDone) -> tuple[list[Path], int]:
    """A `Dataset.save_to_disk` directory: Arrow stream shards, state.json, dataset_info.json."""
    _make_folder(target)
    tables = list(_tables(directory, include_flagged, done))
    names = [f"data-{i:05d}-of-{len(tables):05d}.arrow" for i in range(len(tables))]
    fingerprint = hashlib.sha256()  # datasets keys its caches by this: one per content
    for name, (_, table) in zip(names, tables, strict=True):
        with pa.OSFile(str(target / name), "wb") as sink, pa.ipc.new_stream(sink, SCHEMA) as stream:
            stream.write_table(table)
        fingerprint.update("\n".join(table.column("id").to_pylist()).encode())
    state: dict[str, Any] = {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": fingerprint.hexdigest()[:16],
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    (target / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    (target / "dataset_info.json").write_text(json.dumps({"description": "specpilot generate export"}) + "\n")
    return [target / name for name in names], sum(t.num_rows for _, t in tables)


Writer = Callable[[Path, Path, bool, RowsDone], tuple[list[Path], int]]
FORMATS: dict[str, tuple[str, Writer]] = {
    "specforge": ("specforge.jsonl", lambda d, t, f, p: _write_jsonl(d, t, f, p, with_status=True)),
    "speculators": ("speculators.jsonl", lambda d, t, f, p: _write_jsonl(d, t, f, p, with_status=False)),
    "parquet": ("parquet", _write_parquet),
    "hf": ("hf", _write_hf),
}


def export(
    directory: Path,
    fmt: str,
    target: Path | None = None,
    *,
    include_flagged: bool = False,
    done: RowsDone | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Write the committed rows as `fmt`; `done` hears the rows written so far after each shard.
    An earlier export at the target is replaced only with `overwrite` (never silently)."""
    default_name, write = FORMATS[fmt]
    target = target or directory / default_name
    # an earlier export of this format (a file of another kind is the writer's error to name)
    earlier = (
        target.is_file() if default_name.endswith(".jsonl") else target.is_dir() and any(target.iterdir())
    )
    if earlier and not overwrite:
        raise UserError(
            f"{target} already exists",
            field="--to",
            fix="pass --overwrite to replace it, or give another --to",
        )
    files, rows = write(directory, target, include_flagged, done or _quiet)
    if not files:
        raise UserError(
            f"{directory} has no finished rows{'' if include_flagged else ' in data/'} yet",
            field="DIR",
            fix="run `specpilot generate` into it first (or pass --include-flagged for the flagged rows)",
        )
    return ExportResult(files, rows, include_flagged)
