"""The Arrow formats (Parquet shards, a `datasets` save_to_disk folder): one fixed schema (not
inferred per shard, so shards agree), non-string values stored as JSON text, written a batch
of `BATCH_ROWS` at a time."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specpilot.export.jsonl import json_text
from specpilot.export.writing import WriteRequest, Written
from specpilot.generate.writers.committed import committed_parts

TURN = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning_content", pa.string()),
        ("tool_calls", pa.string()),
        ("tool_call_id", pa.string()),
    ]
)
#: what a row and each of its turns both carry, in this order
ANSWER_META = [
    ("finish_reason", pa.string()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("reasoning_tokens", pa.int64()),
    ("answer_tokens", pa.int64()),
    ("tokens_estimated", pa.bool_()),
    ("server", pa.string()),
    ("spec_accept_length", pa.float64()),
    ("reasoning_split", pa.bool_()),
    ("flags", pa.list_(pa.string())),
]
TURN_META = pa.struct([("index", pa.int64()), *ANSWER_META])
META = pa.struct(
    [
        ("model", pa.string()),
        ("thinking", pa.bool_()),
        ("keep_given_turns", pa.bool_()),
        ("target_turns", pa.list_(pa.int64())),
        *ANSWER_META,
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

#: rows per Arrow record batch / Parquet row group: ~10 MB of ~9 KB rows, whatever the part's size
BATCH_ROWS = 1024


def _arrow_record(row: dict[str, Any]) -> dict[str, Any]:
    turns = [{name: json_text(t.get(name)) for name in TURN.names} for t in row["conversations"]]
    meta = row.get("meta") or {}
    return {
        "id": row["id"],
        "conversations": turns,
        "tools": json_text(row.get("tools")),
        "status": row.get("status", "success"),
        "meta": {name: meta.get(name) for name in META.names},
    }


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
    """The rows as Arrow record batches of `BATCH_ROWS`, built one at a time."""
    while batch := list(itertools.islice(rows, BATCH_ROWS)):
        yield pa.RecordBatch.from_pylist([_arrow_record(row) for row in batch], schema=SCHEMA)


def write_parquet(request: WriteRequest) -> Written:
    """One shard per part, written a row group at a time."""
    target = request.target
    target.mkdir()
    files = []
    rows = 0
    for path, _, part_rows in committed_parts(request.directory, request.splits):
        out = target / f"{path.parent.name}-{path.stem}.parquet"
        with pq.ParquetWriter(out, SCHEMA) as writer:
            for batch in _batches(part_rows):
                writer.write_batch(batch, row_group_size=BATCH_ROWS)
                rows += batch.num_rows
        files.append(out)
        request.done(rows)
    return Written(files, rows)


def write_hf(request: WriteRequest) -> Written:
    """A `Dataset.save_to_disk` directory: Arrow stream shards (one per part, written a batch
    at a time), then state.json and dataset_info.json, which make it a dataset."""
    target = request.target
    target.mkdir()
    parts = list(committed_parts(request.directory, request.splits))  # rows not read yet
    names = [f"data-{i:05d}-of-{len(parts):05d}.arrow" for i in range(len(parts))]
    fingerprint = hashlib.sha256()  # datasets keys its caches by this: one per content
    rows = 0
    for name, (_, _, part_rows) in zip(names, parts, strict=True):
        with pa.OSFile(str(target / name), "wb") as sink, pa.ipc.new_stream(sink, SCHEMA) as stream:
            for batch in _batches(part_rows):
                stream.write_batch(batch)
                rows += batch.num_rows
                fingerprint.update("".join(f"{i}\n" for i in batch.column("id").to_pylist()).encode())
        request.done(rows)
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
    return Written([target / name for name in names], rows)
