"""Where an export goes: never into the job's own files, an earlier export replaced only whole,
written under a hidden temporary name and renamed onto the target at the end."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
from pathlib import Path

from specpilot.errors import UserError
from specpilot.export.formats import FORMATS, ExportFormat

#: what a job folder holds of its own (generate, bench and `specpilot job` write these): an
#: export's target never takes one of these names, even before the job wrote it
JOB_FOLDER_NAMES = frozenset(
    {
        "ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", ".lock", "data", "flagged",
        "errors.jsonl", "rejected.jsonl", "manifest.json", "job.json", "bench", "bench.json", "bench.svg",
        "best.toml",
    }
)  # fmt: skip


def make_folder(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        raise UserError(
            f"cannot make the folder {path}: {err.strerror}",
            field="--to",
            fix="give a folder that does not exist yet or is a folder you can write to",
        ) from None


def refuse_job_folder(directory: Path, to: Path, fmt: ExportFormat) -> None:
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
        fix=f"give a path outside {directory}, or leave --to out (default {fmt.default_target(directory)})",
    )


def _export_name_in_job(job: Path, where: Path) -> bool:
    """An export's default name there, or a name of the user's directly in the job folder that is
    none of the job's own (the job's files, its parts and its ledger stay out of reach)."""
    if where.parent != job:
        return False
    if where.name in {f.default_name for f in FORMATS.values()}:
        return True
    return where.name not in JOB_FOLDER_NAMES and not where.name.startswith(".")


def earlier_export(to: Path, fmt: ExportFormat) -> bool:
    """Whether an earlier export of `fmt` is at `to`; something else there is refused (an
    --overwrite replaces the whole target, so it must be an export of this format)."""
    if fmt.owns is None:
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
    foreign = [name for name in held if not fmt.owns(name)]
    if foreign:
        raise UserError(
            f"{to} holds {foreign[0]}, which no {fmt.name} export writes: "
            "an export replaces its whole folder",
            field="--to",
            fix="give a folder that does not exist yet, is empty, or holds an earlier export of this format",
        )
    return bool(held)


def partial_path(to: Path) -> Path:
    """Where the export is written before it is renamed onto `to` (hidden: no glob of the
    target's folder picks it up); named by this process, so a rerun can tell a killed one's."""
    return to.with_name(f".{to.name}.{os.getpid()}.tmp")


def remove_stale_partials(to: Path) -> None:
    """The partial exports of earlier runs that were killed before renaming theirs."""
    for path in to.parent.glob(f".{glob.escape(to.name)}.*.tmp"):
        pid = path.name[len(to.name) + 2 : -len(".tmp")].removesuffix(".old")
        if pid.isascii() and pid.isdigit() and not _alive(int(pid)):
            remove(path)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (signal 0 is a check: nothing is sent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: alive
    return True


def publish(partial: Path, to: Path) -> None:
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
    remove(aside)


def remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # a read-only disk: nothing was written either
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
