"""Reading back the rows a job has committed, split by split.

Only the bytes the ledger has committed are read, so reading while a job runs never
picks up a torn or not-yet-durable row.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from specpilot.errors import UserError
from specpilot.generate.ledger.disk import disk_error
from specpilot.generate.ledger.report import reading_ledger
from specpilot.generate.ledger.store import PartCommit
from specpilot.generate.writers.parts import Split, line_id, part_path, split_commits

RERUN_FIX = "rerun the same `specpilot generate` command (it makes the lost rows again), then this command"


def committed_parts(
    directory: Path, splits: Sequence[Split]
) -> Iterator[tuple[Path, int, Iterator[dict[str, Any]]]]:
    """(part file, its committed row count, its rows) for each non-empty part of `splits`, in order.

    Rows are read line by line (memory stays one line, whatever the part's size); consume a
    part's rows before asking for the next part. Every part is checked to exist and hold its
    committed bytes before any row is yielded, so a cut or deleted part fails before an export
    writes anything; a line whose checksum no longer matches the ledger's fails as it is read.
    """
    with reading_ledger(directory) as ledger:
        parts: list[tuple[Path, PartCommit]] = []
        for split in splits:
            for commit in split_commits(ledger.part_commits(), split.first_part):
                if commit.rows == 0:
                    continue
                path = part_path(directory / split.directory, commit.part, split.first_part)
                _check_size(path, commit)
                parts.append((path, commit))
        for path, commit in parts:
            yield path, commit.rows, _rows(path, commit, ledger.checksums_in_part(commit.part))


def _check_size(path: Path, commit: PartCommit) -> None:
    try:
        size_bytes = path.stat().st_size
    except FileNotFoundError:
        raise UserError(
            f"{path} is missing but {commit.rows} finished rows were written to it",
            field="DIR",
            fix=RERUN_FIX,
        ) from None
    except OSError as err:
        raise disk_error(
            err, path, field="DIR", elsewhere="check the job folder is readable", writing=False
        ) from None
    if size_bytes < commit.committed_bytes:
        raise UserError(
            f"{path} holds {size_bytes} bytes but {commit.committed_bytes} were written to it: "
            "it was cut short or replaced since",
            field="DIR",
            fix=RERUN_FIX,
        )


def _rows(path: Path, commit: PartCommit, expected: dict[str, int | None] | None) -> Iterator[dict[str, Any]]:
    """The rows in the committed bytes of `path` (a commit ends at a line's end), each checked
    against the checksum the ledger holds for it (`expected` is None for a ledger from before
    checksums)."""
    left = commit.committed_bytes
    try:
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if left <= 0:
                    return
                left -= len(line)
                if not line.strip():
                    continue
                _check_line(path, number, line, expected)
                yield json.loads(line)
    except OSError as err:
        raise disk_error(
            err, path, field="DIR", elsewhere="check the job folder is readable", writing=False
        ) from None


def _check_line(path: Path, number: int, line: bytes, expected: dict[str, int | None] | None) -> None:
    """The line is a row the ledger has in this part, with the checksum it was written with."""
    if expected is None:
        return
    row_id = line_id(line)
    crc = expected.get(row_id) if row_id is not None else None
    if row_id not in expected or crc not in (None, zlib.crc32(line)):
        raise UserError(
            f"{path} line {number} changed since it was written (its checksum does not match the ledger)",
            field="DIR",
            fix=RERUN_FIX.replace("lost rows", "changed rows"),
        )


def committed_rows(directory: Path, splits: Sequence[Split]) -> Iterator[dict[str, Any]]:
    for _, _, rows in committed_parts(directory, splits):
        yield from rows
