"""`specpilot export DIR --format specforge|speculators|parquet|hf`: the committed rows for a trainer.

| format | writes | read by |
|---|---|---|
| `specforge` | one JSONL file, `DIR/specforge.jsonl` | SpecForge `train_data_path`, its validation script |
| `speculators` | one JSONL file, `DIR/speculators.jsonl` | speculators `prepare-data` / `load_raw_dataset` |
| `parquet` | one shard per part, `DIR/parquet/` | `datasets.load_dataset("parquet", data_files=...)` |
| `hf` | a `save_to_disk` directory, `DIR/hf/` | `datasets.load_from_disk` |

Each format is a record in `formats.FORMATS` and a writer (`jsonl.py`, `arrow.py`); this module
runs one. Only clean rows (`data/`) unless `include_flagged`. The JSONL formats carry strings
only (never null), `tools` as a JSON string (so every row has one Arrow type), and
SpecForge's `"status": "success"`. The Parquet/Arrow schema is fixed (not inferred per
shard) so shards agree; non-string values are stored as JSON text.

An export is whole or absent: it is written beside the target under a hidden temporary name
and renamed onto it at the end (`--overwrite` replaces the whole target), never into the
job's own folder (`target.py`).

Every format streams: rows are read a line at a time and written line by line (JSONL) or
a batch of `arrow.BATCH_ROWS` at a time (Parquet row groups, Arrow record batches), so memory
does not grow with the job (bench/export_memory.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specpilot.errors import UserError
from specpilot.export.formats import ExportFormat, format_named, names_with
from specpilot.export.target import (
    earlier_export,
    make_folder,
    partial_path,
    publish,
    refuse_job_folder,
    remove,
    remove_stale_partials,
)
from specpilot.export.trainready import TrainReady, check_export
from specpilot.export.writing import RowsDone, WriteRequest, Written
from specpilot.generate.ledger.disk import disk_error
from specpilot.generate.ledger.report import reading_ledger, summarize


@dataclass
class ExportResult:
    files: list[Path]
    rows: int
    flagged_included: bool
    #: the train-ready check of what was written (`trainready.py`)
    train_ready: TrainReady
    warnings: list[str] = field(default_factory=list)


def chat_template(
    fmt: ExportFormat, requested: str | None, model: str | None
) -> tuple[str | None, list[str]]:
    """The SpecForge chat template an export of `fmt` states and its warnings, for `export` and
    `specpilot job` alike: `templates.choose_template` for the job's `model`; a format that
    carries no template states none (and refuses one asked for)."""
    from specpilot.export.templates import choose_template

    if fmt.takes_template:
        return choose_template(requested, model)
    if requested is not None:
        raise UserError(
            f"applies to --format {names_with(lambda f: f.takes_template)}, not {fmt.name}",
            field="--chat-template",
            fix=f"drop --chat-template, or export with --format {names_with(lambda f: f.takes_template)}",
        )
    return None, []


def _quiet(rows: int) -> None:
    """A `RowsDone` that says nothing."""


def export(
    directory: Path,
    fmt: str,
    target: Path | None = None,
    *,
    include_flagged: bool = False,
    per_turn: bool = True,
    done: RowsDone | None = None,
    overwrite: bool = False,
    skip_train_check: str | None = None,
    tokenizer: Path | None = None,
    chat_template: str | None = None,
) -> ExportResult:
    """Write the committed rows as `fmt` (a name in `formats.FORMATS`); `per_turn` (formats that
    split turns): one row per target turn, see `rows.turn_rows`; `done` hears the rows written so
    far after each part. An earlier export at the target is replaced only with `overwrite` (never
    silently), and then whole. Once written, the train-ready check (unless `skip_train_check`,
    the flag or key that turned it off) renders a sample with the tokenizer in `tokenizer` (None:
    the job's model, if a local folder) and the trainer's `chat_template`; its outcome is the
    result's `train_ready` (a mismatch does not unwrite the export: the caller says so and fails).

    The export is written beside the target under a temporary name and renamed onto it at the
    end, so the target is whole or absent: a killed or refused export (a changed part, a full
    disk) leaves no target, and a refused `--overwrite` leaves the earlier export as it was."""
    spec = format_named(fmt, field="--format")
    to = target or spec.default_target(directory)
    _refuse_target(directory, to, spec, overwrite)
    make_folder(to.parent)
    remove_stale_partials(to)
    request = WriteRequest(directory, partial_path(to), include_flagged, per_turn, done or _quiet)
    written = _write(spec, request, to)
    warnings = _left_out_warnings(written)
    _refuse_nothing_written(directory, written, include_flagged)
    checked = (
        TrainReady(skipped=skip_train_check)
        if skip_train_check
        else check_export(directory, spec, request.splits, tokenizer=tokenizer, chat_template=chat_template)
    )
    return ExportResult(written.files, written.rows, include_flagged, checked, warnings=warnings)


def _refuse_target(directory: Path, to: Path, spec: ExportFormat, overwrite: bool) -> None:
    """Refuse a target inside the job's folder, or an earlier export there without `overwrite`."""
    refuse_job_folder(directory, to, spec)
    if earlier_export(to, spec) and not overwrite:
        raise UserError(
            f"{to} already exists", field="--to", fix="pass --overwrite to replace it, or give another --to"
        )


def _write(spec: ExportFormat, request: WriteRequest, to: Path) -> Written:
    """Run the format's writer into `request.target` and rename what it wrote onto `to`; the
    files written, named where they are now."""
    partial = request.target
    try:
        written = spec.load_writer()(request)
        if written.files:
            publish(partial, to)
    except OSError as err:
        # reading the job's own files says so itself (committed_parts): this is the target
        raise disk_error(
            err, to, field="--to", elsewhere="pass --to a writable path on a disk with room"
        ) from None
    finally:
        remove(partial)  # nothing half-written is left behind (a full disk is then not fuller)
    written.files = [to / f.name if f.parent == partial else to for f in written.files]
    return written


def _left_out_warnings(written: Written) -> list[str]:
    if not written.left_out:
        return []
    return [
        f"{written.left_out} rows left out: they hold given assistant turns (--keep-given-turns), "
        "which speculators would train as if the target wrote them; --format specforge trains only "
        "the target's turns of them"
    ]


def _refuse_nothing_written(directory: Path, written: Written, include_flagged: bool) -> None:
    """An export of no rows is refused with why: every row holds given turns, every finished
    row is flagged, or none is finished yet."""
    if written.files:
        return
    if written.left_out:
        raise UserError(
            f"every row of {directory} holds given assistant turns (--keep-given-turns), which "
            "speculators would train on as if the target wrote them",
            field="--format",
            fix="use --format specforge (one row per target turn: only the target's turns are trained)",
        )
    if not include_flagged:
        _refuse_only_flagged(directory)
    raise UserError(
        f"{directory} has no finished rows{'' if include_flagged else ' in data/'} yet",
        field="DIR",
        fix="run `specpilot generate` into it first (or pass --include-flagged for the flagged rows)",
    )


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
