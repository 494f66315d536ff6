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

An export is whole or absent: it is written beside the target under a hidden temporary name
and renamed onto it at the end (`--overwrite` replaces the whole target), never into the
job's own folder.

Every format streams: rows are read a line at a time and written line by line (JSONL) or
a batch of `BATCH_ROWS` at a time (Parquet row groups, Arrow record batches), so memory
does not grow with the job (bench/export_memory.py measures it).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specpilot.errors import UserError
from specpilot.generate.committed import committed_parts
from specpilot.generate.disk import disk_error
from specpilot.generate.report import reading_ledger, summarize
from specpilot.generate.rows import turn_rows
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
        ("reasoning_split", pa.bool_()),
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
        ("reasoning_split", pa.bool_()),
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


def _make_folder(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        raise UserError(
            f"cannot make the folder {path}: {err.strerror}",
            field="--to",
            fix="give a folder that does not exist yet or is a folder you can write to",
        ) from None


def _splits(include_flagged: bool) -> tuple[Split, ...]:
    return (CLEAN, FLAGGED) if include_flagged else (CLEAN,)


#: what one stored row becomes in a JSONL export: its records (none: the row is left out)
Records = Callable[[dict[str, Any]], list[dict[str, Any]]]


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


#: told the rows written so far, after each part (off a terminal: a progress line)
RowsDone = Callable[[int], object]


def _quiet(rows: int) -> None:
    """A `RowsDone` that says nothing."""


@dataclass
class _Written:
    files: list[Path]
    rows: int  # records written
    left_out: int = 0  # stored rows that became no record


def _write_jsonl(
    directory: Path, target: Path, include_flagged: bool, done: RowsDone, records: Records
) -> _Written:
    written = left_out = 0
    with target.open("w", encoding="utf-8") as out:
        for _, _, part_rows in committed_parts(directory, _splits(include_flagged)):
            for row in part_rows:
                made = records(row)
                left_out += not made
                for record in made:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += len(made)
            done(written)
        out.flush()
        os.fsync(out.fileno())
    return _Written([target] if written else [], written, left_out)


#: rows per Arrow record batch / Parquet row group: ~10 MB of ~9 KB rows, whatever the part's size
BATCH_ROWS = 1024


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
    """The rows as Arrow record batches of `BATCH_ROWS`, built one at a time."""
    while batch := list(itertools.islice(rows, BATCH_ROWS)):
        yield pa.RecordBatch.from_pylist([_arrow_record(row) for row in batch], schema=SCHEMA)


def _write_parquet(directory: Path, target: Path, include_flagged: bool, done: RowsDone) -> _Written:
    """One shard per part, written a row group at a time."""
    target.mkdir()
    files: list[Path] = []
    rows = 0
    for path, _, part_rows in committed_parts(directory, _splits(include_flagged)):
        out = target / f"{path.parent.name}-{path.stem}.parquet"
        with pq.ParquetWriter(out, SCHEMA) as writer:
            for batch in _batches(part_rows):
                writer.write_batch(batch, row_group_size=BATCH_ROWS)
                rows += batch.num_rows
        files.append(out)
        done(rows)
    return _Written(files, rows)


def _write_hf(directory: Path, target: Path, include_flagged: bool, done: RowsDone) -> _Written:
    """A `Dataset.save_to_disk` directory: Arrow stream shards (one per part, written a batch
    at a time), then state.json and dataset_info.json, which make it a dataset."""
    target.mkdir()
    parts = list(committed_parts(directory, _splits(include_flagged)))  # rows not read yet
    names = [f"data-{i:05d}-of-{len(parts):05d}.arrow" for i in range(len(parts))]
    fingerprint = hashlib.sha256()  # datasets keys its caches by this: one per content
    rows = 0
    for name, (_, _, part_rows) in zip(names, parts, strict=True):
        with pa.OSFile(str(target / name), "wb") as sink, pa.ipc.new_stream(sink, SCHEMA) as stream:
            for batch in _batches(part_rows):
                stream.write_batch(batch)
                rows += batch.num_rows
                fingerprint.update("".join(f"{i}\n" for i in batch.column("id").to_pylist()).encode())
        done(rows)
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
    return _Written([target / name for name in names], rows)


#: what a job folder holds of its own (generate, bench and `specpilot job` write these): an
#: export's target never takes one of these names, even before the job wrote it
JOB_FOLDER_NAMES = frozenset(
    {
        "ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", ".lock", "data", "flagged",
        "errors.jsonl", "rejected.jsonl", "manifest.json", "job.json", "bench", "bench.json", "bench.svg",
    }
)  # fmt: skip


def _refuse_job_folder(directory: Path, to: Path, fmt: str) -> None:
    """An export never writes into the job's own files: `--to` the job folder, a folder above it
    (an --overwrite would replace the job), or a path inside it other than an export's default
    or a new name of the user's beside the job's files (`out/whole.jsonl`)."""
    job, where = directory.resolve(), to.resolve()
    if where == job:
        what = "is the job folder"
    elif job.is_relative_to(where):
        what = "holds the job folder"
    elif where.is_relative_to(job) and not _export_name_in_job(job, where):
        what = "is inside the job folder"
    else:
        return
    raise UserError(
        f"{to} {what} {directory}, which holds the job's data: an export never writes there",
        field="--to",
        fix=f"give a path outside {directory}, or leave --to out (default {directory / FORMATS[fmt]})",
    )


def _export_name_in_job(job: Path, where: Path) -> bool:
    """An export's default name there, or a name of the user's directly in the job folder that is
    none of the job's own (the job's files, its parts and its ledger stay out of reach)."""
    if where.parent != job:
        return False
    if where.name in FORMATS.values():
        return True
    return where.name not in JOB_FOLDER_NAMES and not where.name.startswith(".")


def _earlier_export(to: Path, fmt: str) -> bool:
    """Whether an earlier export of `fmt` is at `to`; something else there is refused (an
    --overwrite replaces the whole target, so it must be an export of this format)."""
    if FORMATS[fmt].endswith(".jsonl"):
        if to.is_dir():
            raise UserError(
                f"{to} is a folder", field="--to", fix="give the path of the .jsonl file to write"
            )
        return to.exists()
    if to.exists() and not to.is_dir():
        raise UserError(
            f"{to} is a file, not a folder",
            field="--to",
            fix="give a folder that does not exist yet or is a folder you can write to",
        )
    held = sorted(p.name for p in to.iterdir()) if to.is_dir() else []
    foreign = [name for name in held if not _export_file(name, fmt)]
    if foreign:
        raise UserError(
            f"{to} holds {foreign[0]}, which no {fmt} export writes: an export replaces its whole folder",
            field="--to",
            fix="give a folder that does not exist yet, is empty, or holds an earlier export of this format",
        )
    return bool(held)


def _export_file(name: str, fmt: str) -> bool:
    if fmt == "parquet":
        return name.endswith(".parquet")
    return name in ("state.json", "dataset_info.json") or (
        name.startswith("data-") and name.endswith(".arrow")
    )


def _partial_path(to: Path) -> Path:
    """Where the export is written before it is renamed onto `to` (hidden: no glob of the
    target's folder picks it up); named by this process, so a rerun can tell a killed one's."""
    return to.with_name(f".{to.name}.{os.getpid()}.tmp")


def _remove_stale_partials(to: Path) -> None:
    """The partial exports of earlier runs that were killed before renaming theirs."""
    for path in to.parent.glob(f".{glob.escape(to.name)}.*.tmp"):
        pid = path.name[len(to.name) + 2 : -len(".tmp")].removesuffix(".old")
        if pid.isascii() and pid.isdigit() and not _alive(int(pid)):
            _remove(path)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (signal 0 is a check: nothing is sent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: alive
    return True


def _publish(partial: Path, to: Path) -> None:
    """Put the finished export at `to`: a file by one rename; a folder by moving the earlier one
    aside, renaming the new one in, then deleting the earlier one (no mix of the two is ever seen)."""
    if not partial.is_dir() or not to.is_dir():
        partial.replace(to)
        return
    aside = to.with_name(f".{to.name}.{os.getpid()}.old.tmp")
    to.rename(aside)
    try:
        partial.rename(to)
    except OSError:
        aside.rename(to)  # the earlier export stays
        raise
    _remove(aside)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # a read-only disk: nothing was written either
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


Writer = Callable[[Path, Path, bool, RowsDone], _Written]
FORMATS: dict[str, str] = {
    "specforge": "specforge.jsonl",
    "speculators": "speculators.jsonl",
    "parquet": "parquet",
    "hf": "hf",
}


def _writer(fmt: str, per_turn: bool) -> Writer:
    if fmt == "specforge":
        return lambda d, t, f, p: _write_jsonl(d, t, f, p, specforge_records(per_turn))
    if fmt == "speculators":
        return lambda d, t, f, p: _write_jsonl(d, t, f, p, speculators_records)
    return _write_parquet if fmt == "parquet" else _write_hf


def export(
    directory: Path,
    fmt: str,
    target: Path | None = None,
    *,
    include_flagged: bool = False,
    per_turn: bool = True,
    done: RowsDone | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Write the committed rows as `fmt`; `per_turn` (specforge only): one row per target turn, see
    `rows.turn_rows`; `done` hears the rows written so far after each part. An earlier export
    at the target is replaced only with `overwrite` (never silently), and then whole.

    The export is written beside the target under a temporary name and renamed onto it at the
    end, so the target is whole or absent: a killed or refused export (a changed part, a full
    disk) leaves no target, and a refused `--overwrite` leaves the earlier export as it was."""
    to = target or directory / FORMATS[fmt]
    _refuse_job_folder(directory, to, fmt)
    earlier = _earlier_export(to, fmt)
    if earlier and not overwrite:
        raise UserError(
            f"{to} already exists", field="--to", fix="pass --overwrite to replace it, or give another --to"
        )
    _make_folder(to.parent)
    _remove_stale_partials(to)
    partial = _partial_path(to)
    try:
        written = _writer(fmt, per_turn)(directory, partial, include_flagged, done or _quiet)
        if written.files:
            _publish(partial, to)
    except OSError as err:
        # reading the job's own files says so itself (committed_parts): this is the target
        raise disk_error(
            err, to, field="--to", elsewhere="pass --to a writable path on a disk with room"
        ) from None
    finally:
        _remove(partial)  # nothing half-written is left behind (a full disk is then not fuller)
    written.files = [to / f.name if f.parent == partial else to for f in written.files]
    warnings = []
    if written.left_out:
        warnings.append(
            f"{written.left_out} rows left out: they hold given assistant turns (--keep-given-turns), "
            "which speculators would train as if the target wrote them; --format specforge trains only "
            "the target's turns of them"
        )
    if not written.files and written.left_out:
        raise UserError(
            f"every row of {directory} holds given assistant turns (--keep-given-turns), which "
            "speculators would train on as if the target wrote them",
            field="--format",
            fix="use --format specforge (one row per target turn: only the target's turns are trained)",
        )
    if not written.files and not include_flagged:
        _refuse_only_flagged(directory)
    if not written.files:
        raise UserError(
            f"{directory} has no finished rows{'' if include_flagged else ' in data/'} yet",
            field="DIR",
            fix="run `specpilot generate` into it first (or pass --include-flagged for the flagged rows)",
        )
    return ExportResult(written.files, written.rows, include_flagged, warnings=warnings)


def _refuse_only_flagged(directory: Path) -> None:
    """Every finished row is flagged: say so, and which flags, rather than "no rows yet"."""
    with reading_ledger(directory) as ledger:
        summary = summarize(ledger)
    if not summary.flagged:
        return
    flags = ", ".join(f"{flag} {count}" for flag, count in summary.flags.items() if count)
    raise UserError(
        f"{directory} has no clean rows: all {summary.flagged} finished rows are flagged ({flags})",
        field="DIR",
        fix="`specpilot report DIR` says what each flag means; fix the cause and generate again, "
        "or pass --include-flagged to export the flagged rows as they are",
    )
