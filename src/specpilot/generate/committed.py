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
from specpilot.generate.disk import disk_error
from specpilot.generate.ledger import PartCommit
from specpilot.generate.report import reading_ledger
from specpilot.generate.writer import Split, list_parts


def job_commits(directory: Path) -> dict[int, PartCommit]:
    """The ledger's part commits; UserError if `directory` is not a readable job directory."""
    with reading_ledger(directory) as ledger:
        return ledger.part_commits()


def committed_parts(directory: Path, splits: Sequence[Split]) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """(part file, its committed rows) for each non-empty part of `splits`, in order."""
    commits = job_commits(directory)
    for split in splits:
        for part, path in list_parts(directory / split.directory, split.first_part).items():
            commit = commits.get(part)
            if commit is None or commit.rows == 0:
                continue
            try:
                with path.open("rb") as handle:
                    data = handle.read(commit.committed_bytes)
            except OSError as err:
                fix = "check the job folder is readable"
                raise disk_error(err, path, field="DIR", elsewhere=fix, writing=False) from None
            if len(data) < commit.committed_bytes:
                raise UserError(
                    f"{path} holds {len(data)} bytes but {commit.committed_bytes} were written to it: "
                    "it was cut short or replaced since",
                    field="DIR",
                    fix="rerun the same `specpilot generate` command (it makes the lost rows again), "
                    "then this command",
                )
            yield path, [json.loads(line) for line in data.splitlines() if line]


def committed_rows(directory: Path, splits: Sequence[Split]) -> Iterator[dict[str, Any]]:
    for _, rows in committed_parts(directory, splits):
        yield from rows
