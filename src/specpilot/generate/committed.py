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
from specpilot.generate.disk import disk_error
from specpilot.generate.ledger import PartCommit
from specpilot.generate.report import reading_ledger
from specpilot.generate.writer import Split, line_id, part_path, split_commits

RERUN_FIX = "rerun the same `specpilot generate` command (it makes the lost rows again), then this command"


def committed_parts(directory: Path, splits: Sequence[Split]) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """(part file, its committed rows) for each non-empty part of `splits`, in order.

    A part that is missing, cut short, or holds a line whose checksum no longer matches
    the ledger's is one line saying so: nothing is exported from a damaged job.
    """
    with reading_ledger(directory) as ledger:
        commits = ledger.part_commits()
        for split in splits:
            for commit in split_commits(commits, split.first_part):
                if commit.rows == 0:
                    continue
                path = part_path(directory / split.directory, commit.part, split.first_part)
                lines = _read(path, commit).splitlines(keepends=True)
                _check(path, lines, ledger.checksums_in_part(commit.part))
                yield path, [json.loads(line) for line in lines]


def _read(path: Path, commit: PartCommit) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(commit.committed_bytes)
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
    if len(data) < commit.committed_bytes:
        raise UserError(
            f"{path} holds {len(data)} bytes but {commit.committed_bytes} were written to it: "
            "it was cut short or replaced since",
            field="DIR",
            fix=RERUN_FIX,
        )
    return data


def _check(path: Path, lines: list[bytes], expected: dict[str, int | None] | None) -> None:
    """Each line is a row the ledger has in this part, with the checksum it was written with."""
    if expected is None:  # a ledger from before checksums
        return
    for number, line in enumerate(lines, start=1):
        row_id = line_id(line)
        crc = expected.get(row_id) if row_id is not None else None
        if row_id not in expected or crc not in (None, zlib.crc32(line)):
            raise UserError(
                f"{path} line {number} changed since it was written (its checksum does not match the ledger)",
                field="DIR",
                fix=RERUN_FIX.replace("lost rows", "changed rows"),
            )


def committed_rows(directory: Path, splits: Sequence[Split]) -> Iterator[dict[str, Any]]:
    for _, rows in committed_parts(directory, splits):
        yield from rows
