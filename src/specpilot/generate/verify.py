"""`specpilot verify`: read every committed byte of a job's parts and queue each changed row again."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.errors import UserError
from specpilot.generate.job import storage_error
from specpilot.generate.ledger.lock import DirectoryLock
from specpilot.generate.ledger.store import LEDGER_FILE, Ledger
from specpilot.generate.writers.parts import SPLITS, DamagedRow, reconcile_parts


@dataclass(frozen=True)
class Verified:
    """What `specpilot verify` read and repaired."""

    parts: int
    rows: int
    damaged: tuple[DamagedRow, ...]
    requeued_rows: int
    lost_parts: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "parts": self.parts,
            "rows": self.rows,
            "requeued_rows": self.requeued_rows,
            "lost_parts": list(self.lost_parts),
            "damaged": [{"part": d.part, "line": d.line, "id": d.row_id} for d in self.damaged],
        }


def verify_job(directory: Path) -> Verified:
    """Read every committed byte of a job's parts (streamed, one part's ids in memory), take
    out each row whose line changed or is gone and queue it to be generated again; with the
    job's lock held, so no `generate` writes meanwhile."""
    if not (directory / LEDGER_FILE).is_file():
        raise UserError(
            f"{directory} holds no generate job (no {LEDGER_FILE})",
            field="DIR",
            fix="pass the --output folder of a `specpilot generate` job",
        )
    try:
        return _verify_locked(directory)
    except (OSError, sqlite3.Error) as err:
        raise storage_error(err, directory, None, field="DIR") from err


def _verify_locked(directory: Path) -> Verified:
    lock = DirectoryLock(directory)
    try:
        ledger = Ledger.in_dir(directory)
        try:
            damaged: list[DamagedRow] = []
            lost: list[str] = []
            requeued = 0
            for split in SPLITS:
                folder = directory / split.directory
                folder.mkdir(exist_ok=True)
                found = reconcile_parts(folder, ledger, split.first_part, full=True)
                damaged += found.damaged
                lost += [f"{split.directory}/{name}" for name in found.lost_parts]
                requeued += found.requeued_rows + found.changed_rows
            commits = ledger.part_commits().values()
            return Verified(
                sum(1 for c in commits if c.rows),
                sum(c.rows for c in commits),
                tuple(damaged),
                requeued,
                tuple(lost),
            )
        finally:
            ledger.close()
    finally:
        lock.release()
