"""What the status page shows from a job's ledger, read strictly read-only.

`mode=ro` alone is not read-only for the folder: on a ledger whose writer has closed
(no `-wal` file), SQLite creates `-wal` and `-shm` next to it. So a closed ledger is
opened `immutable=1` (no lock, no side files) and a live one (its writer keeps a
`-wal`) `mode=ro`, which reads the last committed transaction while the job writes.
The choice is made again at every read, so a view follows a job that starts later.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from specpilot.errors import UserError
from specpilot.generate.dispatch.causes import cause_of
from specpilot.generate.ledger.report import JobSummary, summarize
from specpilot.generate.ledger.store import LEDGER_FILE, Ledger, RowState
from specpilot.generate.rows.validate import FLAG_NAMES

#: how long a read waits for a writer that holds the ledger exclusively
LOCK_WAIT_S = 2.0
ROWS_LISTED = 20
THROUGHPUT_BUCKETS = 300
LENGTH_BUCKETS = 30


class ReadOnlyLedger(Ledger):
    """The Ledger's queries over a connection that never writes the job's folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        wal = path.with_name(path.name + "-wal")
        # a folder that cannot be written (a read-only disk) cannot take mode=ro's -shm either
        mode = "mode=ro" if wal.exists() and os.access(path.parent, os.W_OK) else "immutable=1"
        self._db = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=LOCK_WAIT_S)


@dataclass(frozen=True)
class LedgerSnapshot:
    """Everything the page and /metrics take from the ledger, read in one go."""

    summary: JobSummary
    #: (first done_at, bucket width s, [(bucket start, rows, completion tokens)])
    throughput: list[tuple[float, int, int]]
    throughput_bucket_s: float
    #: (bucket lower bound in tokens, rows) over done rows' completion_tokens
    length_histogram: list[tuple[int, int]]
    length_bucket_tokens: int
    failed_by_cause: dict[str, int]
    retrying_by_cause: dict[str, int]
    #: (id, flag names) of the most recent flagged rows
    flagged: list[tuple[str, list[str]]]
    #: (id, attempts, cause, error text) of the last failed rows
    failed: list[tuple[str, int, str, str]]
    servers: list[str] = field(default_factory=list)


def open_readonly(directory: Path) -> ReadOnlyLedger:
    """The job's ledger, or a one-line UserError saying why this folder cannot be viewed."""
    path = directory / LEDGER_FILE
    if not directory.is_dir() or not path.is_file():
        raise UserError(
            f"{directory} is not a generate job (no {LEDGER_FILE})",
            field="OUTDIR",
            fix="pass the --output directory of a `specpilot generate` job",
        )
    ledger = ReadOnlyLedger(path)
    try:
        initialized = ledger.is_initialized()
    except sqlite3.OperationalError as err:
        ledger.close()
        if "locked" in str(err):
            raise UserError(
                f"{path} is locked by a writer that does not allow readers",
                field="OUTDIR",
                fix="wait for that process to finish or stop it, then run `specpilot view` again",
            ) from None
        raise _not_a_ledger(path, err) from None
    except sqlite3.DatabaseError as err:
        ledger.close()
        raise _not_a_ledger(path, err) from None
    if not initialized:
        ledger.close()
        raise UserError(
            f"{directory} has not listed its input rows yet",
            field="OUTDIR",
            fix="wait until `specpilot generate` has started sending, then run `specpilot view` again",
        )
    return ledger


def _not_a_ledger(path: Path, err: Exception) -> UserError:
    return UserError(
        f"{path} is not a specpilot ledger ({err})",
        field="OUTDIR",
        fix="pass the --output directory of a `specpilot generate` job",
    )


def read_snapshot(directory: Path) -> LedgerSnapshot:
    """One consistent read of the ledger (a single read transaction)."""
    ledger = open_readonly(directory)
    try:
        ledger.query("BEGIN")
        try:
            return _snapshot(ledger)
        finally:
            ledger.query("COMMIT")
    except sqlite3.OperationalError as err:
        if "locked" not in str(err):
            raise
        raise UserError(
            f"{ledger.path} is locked by a writer that does not allow readers",
            field="OUTDIR",
            fix="wait for that process to finish or stop it, then retry",
        ) from None
    finally:
        ledger.close()


def _snapshot(ledger: Ledger) -> LedgerSnapshot:
    summary = summarize(ledger)
    throughput, bucket_s = _throughput(ledger)
    lengths, bucket_tokens = _length_histogram(ledger)
    return LedgerSnapshot(
        summary=summary,
        throughput=throughput,
        throughput_bucket_s=bucket_s,
        length_histogram=lengths,
        length_bucket_tokens=bucket_tokens,
        failed_by_cause=_by_cause(ledger, f"state = {RowState.FAILED}"),
        retrying_by_cause=_by_cause(
            ledger, f"state IN ({RowState.PENDING}, {RowState.IN_FLIGHT}) AND last_error IS NOT NULL"
        ),
        flagged=[
            (str(row_id), [n for bit, n in enumerate(FLAG_NAMES) if int(str(flags)) >> bit & 1])
            for row_id, flags in ledger.query(
                f"SELECT id, flags FROM rows WHERE state = {RowState.DONE} AND flags != 0 "
                "ORDER BY done_at DESC LIMIT ?",
                (ROWS_LISTED,),
            )
        ],
        failed=[
            (str(row_id), int(str(attempts)), cause_of(str(error or "")), str(error or ""))
            for row_id, attempts, error in ledger.query(
                f"SELECT id, attempts, last_error FROM rows WHERE state = {RowState.FAILED} "
                "ORDER BY position DESC LIMIT ?",
                (ROWS_LISTED,),
            )
        ],
        servers=list(summary.servers),
    )


def _by_cause(ledger: Ledger, where: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for error, count in ledger.query(f"SELECT last_error, COUNT(*) FROM rows WHERE {where} GROUP BY 1"):
        counts[cause_of(str(error or ""))] += int(str(count))
    return dict(counts.most_common())


def _throughput(ledger: Ledger) -> tuple[list[tuple[float, int, int]], float]:
    """Rows and output tokens finished per time bucket, over the job's whole life."""
    ((first, last),) = ledger.query("SELECT MIN(done_at), MAX(done_at) FROM rows WHERE done_at IS NOT NULL")
    if first is None or last is None:
        return [], 1.0
    start, end = float(str(first)), float(str(last))
    bucket_s = max((end - start) / THROUGHPUT_BUCKETS, 1.0)
    found = {
        int(str(b)): (int(str(n)), int(str(t or 0)))
        for b, n, t in ledger.query(
            "SELECT CAST((done_at - ?) / ? AS INTEGER), COUNT(*), SUM(completion_tokens) "
            "FROM rows WHERE done_at IS NOT NULL GROUP BY 1",
            (start, bucket_s),
        )
    }
    buckets = range(max(found, default=0) + 1)
    return [(start + b * bucket_s, *found.get(b, (0, 0))) for b in buckets], bucket_s


def _length_histogram(ledger: Ledger) -> tuple[list[tuple[int, int]], int]:
    """Done rows by completion length, in at most LENGTH_BUCKETS equal-width buckets."""
    ((longest,),) = ledger.query(f"SELECT MAX(completion_tokens) FROM rows WHERE state = {RowState.DONE}")
    if longest is None:
        return [], 1
    width = max(-(-(int(str(longest)) + 1) // LENGTH_BUCKETS), 1)
    found = {
        int(str(bucket)): int(str(count))
        for bucket, count in ledger.query(
            f"SELECT completion_tokens / ?, COUNT(*) FROM rows WHERE state = {RowState.DONE} GROUP BY 1",
            (width,),
        )
    }
    return [(b * width, found.get(b, 0)) for b in range(max(found) + 1)], width
