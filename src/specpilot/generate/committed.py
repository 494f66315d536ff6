"""Reading back the rows a job has committed, split by split.

Only the bytes the ledger has committed are read, so reading while a job runs never
picks up a torn or not-yet-durable row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from specpilot.errors import UserError
from specpilot.generate.ledger import PartCommit
from specpilot.generate.report import reading_ledger
from specpilot.generate.writer import Split, list_parts


def job_commits(directory: Path) -> dict[int, PartCommit]:
    """The ledger's part commits; UserError if `directory` is not a readable job directory."""
    with reading_ledger(directory) as ledger:
        return ledger.part_commits()


def committed_parts(
    directory: Path, splits: Sequence[Split]
) -> Iterator[tuple[Path, int, Iterator[dict[str, Any]]]]:
    """(part file, its committed row count, its rows) for each non-empty part of `splits`, in order.

    Rows are read line by line (memory stays one line, whatever the part's size); consume a
    part's rows before asking for the next part. Every part's length is checked before any
    row is yielded, so a damaged job fails before an export writes anything.
    """
    commits = job_commits(directory)
    parts: list[tuple[Path, PartCommit]] = []
    for split in splits:
        for part, path in list_parts(directory / split.directory, split.first_part).items():
            commit = commits.get(part)
            if commit is None or commit.rows == 0:
                continue
            size_bytes = path.stat().st_size
            if size_bytes < commit.committed_bytes:
                raise UserError(
                    f"{path} holds {size_bytes} bytes but {commit.committed_bytes} were written to it: "
                    "it was cut short or replaced since",
                    field="DIR",
                    fix="rerun the same `specpilot generate` command (it makes the lost rows again), "
                    "then this command",
                )
            parts.append((path, commit))
    for path, commit in parts:
        yield path, commit.rows, _rows(path, commit.committed_bytes)


def _rows(path: Path, committed_bytes: int) -> Iterator[dict[str, Any]]:
    """The rows in the first `committed_bytes` of `path` (a commit ends at a line's end)."""
    left = committed_bytes
    with path.open("rb") as handle:
        for line in handle:
            if left <= 0:
                return
            left -= len(line)
            if line.strip():
                yield json.loads(line)


def committed_rows(directory: Path, splits: Sequence[Split]) -> Iterator[dict[str, Any]]:
    for _, _, rows in committed_parts(directory, splits):
        yield from rows
