"""The job ledger: one SQLite database (WAL) in the output directory.

Tables:

* `rows(position, id, state, attempts, last_error, part, prompt_tokens,
  completion_tokens, flags, done_at)`: one row per input prompt, keyed by its input
  position (so a resume parses only pending input rows) with `id` unique.
* `parts(part, committed_bytes, rows, crc, mtime_ns, tail_start, tail_crc)`: per output
  shard, how many bytes of it hold rows that this ledger marks done, and its verified
  mark: the crc32 of those bytes, the file's mtime when they were committed, and where
  the last commit's bytes start (with the crc32 up to there). A start trusts a part whose
  size and mtime match its mark and re-reads only the last commit of the newest part;
  `specpilot verify` reads every byte.
* `meta(key, value)`: job parameters, input fingerprint and hash, last metrics.

Exactly-once invariant (together with `writers/parts.py`):

    For every part file, bytes [0, committed_bytes) hold exactly the rows that
    the ledger marks `done` with that part, each once, each a complete line.

It holds because the writer fsyncs a batch of rows *before* the ledger transaction
that marks them done and advances `committed_bytes` commits, and both updates are in
one transaction. A kill can therefore only leave bytes *after* `committed_bytes`
(whole rows, perhaps a torn last line) that the ledger does not know as done;
`writer.reconcile_parts` adopts the whole, valid, not-yet-done rows there and
truncates the rest before anything new is written. Rows that were in memory or in
flight are still `pending`/`in_flight` and are simply sent again.

`synchronous=NORMAL` is enough: in WAL mode a process kill never loses a commit, and
a power loss that drops the newest commits only makes the ledger lag the (fsynced)
part files, which the reconciliation above repairs.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

LEDGER_FILE = "ledger.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rows (
    position INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    state INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    part INTEGER,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    flags INTEGER NOT NULL DEFAULT 0,
    done_at REAL,
    crc INTEGER
);
CREATE INDEX IF NOT EXISTS rows_by_state ON rows (state);
CREATE TABLE IF NOT EXISTS input_marks (
    position INTEGER PRIMARY KEY,
    byte_offset INTEGER NOT NULL,
    line_number INTEGER NOT NULL,
    block_crc INTEGER  -- zlib.crc32 of the input's bytes from this mark to the next (or the end)
);
CREATE TABLE IF NOT EXISTS parts (
    part INTEGER PRIMARY KEY,
    committed_bytes INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    crc INTEGER,
    mtime_ns INTEGER,
    tail_start INTEGER NOT NULL DEFAULT 0,
    tail_crc INTEGER
);
"""
#: the verified mark's columns, added to a ledger from before them
PART_MARK_COLUMNS = {
    "crc": "INTEGER",
    "mtime_ns": "INTEGER",
    "tail_start": "INTEGER NOT NULL DEFAULT 0",
    "tail_crc": "INTEGER",
}

PUT_PART = (
    "INSERT OR REPLACE INTO parts (part, committed_bytes, rows, crc, mtime_ns, tail_start, tail_crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)

#: SQLite's page cache while the input is listed (KiB; pages are taken as the index grows)
LISTING_CACHE_KIB = 64 * 1024
#: rows listed by one INSERT (two variables each: under SQLite's oldest limit of 999)
INSERT_ROWS_PER_STATEMENT = 400

#: a reader (`report`) or the job itself waits this long for the other side's SQLite lock
SQLITE_BUSY_TIMEOUT_S = 30.0


class RowState(IntEnum):
    PENDING = 0
    IN_FLIGHT = 1
    DONE = 2
    FAILED = 3


@dataclass(frozen=True, slots=True)
class DoneRecord:
    """What the ledger keeps about a finished row (the row itself is in its part)."""

    position: int
    part: int
    prompt_tokens: int
    completion_tokens: int
    flags: int
    done_at: float
    #: zlib.crc32 of the row's line in its part, checked at resume and export
    crc: int | None = None


@dataclass(frozen=True, slots=True)
class PartCommit:
    """A part file's new durable length and its row count, with its verified mark."""

    part: int
    committed_bytes: int
    rows: int
    #: zlib.crc32 of bytes [0, committed_bytes); None: not known (a ledger from before marks)
    crc: int | None = None
    #: the file's st_mtime_ns right after those bytes were fsynced
    mtime_ns: int | None = None
    #: the last commit's bytes are [tail_start, committed_bytes); the crc32 of the bytes before them
    tail_start: int = 0
    tail_crc: int | None = None

    def as_row(self) -> tuple[int, int, int, int | None, int | None, int, int | None]:
        return (
            self.part,
            self.committed_bytes,
            self.rows,
            self.crc,
            self.mtime_ns,
            self.tail_start,
            self.tail_crc,
        )


@dataclass
class LedgerBatch:
    """State changes gathered between two commits (applied in one transaction)."""

    started: list[int]
    retried: list[tuple[str, int]]  # (error, position)
    failed: list[tuple[str, int]]
    done: list[DoneRecord]
    parts: list[PartCommit]
    #: rows out of flight and waiting to be sent again (a retry's backoff, a server gone):
    #: `pending` again, so the ledger's `in_flight` is what is out now
    waiting: set[int] = field(default_factory=set)

    @classmethod
    def empty(cls) -> LedgerBatch:
        return cls([], [], [], [], [])

    def __bool__(self) -> bool:
        return bool(self.started or self.retried or self.failed or self.done or self.parts or self.waiting)


class Ledger:
    """Access to the ledger database; `readonly=True` is what `report` uses mid-job."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        if readonly:
            # `mode=ro` on a closed ledger (no -wal) would still create -wal and -shm: that
            # one, or any in a folder that cannot be written (a read-only disk), is immutable
            live = path.with_name(path.name + "-wal").exists() and os.access(path.parent, os.W_OK)
            mode = "mode=ro" if live else "immutable=1"
            uri = f"{path.resolve().as_uri()}?{mode}"
            self._db = sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
        else:
            self._db = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(rows)")}
            if "crc" not in columns:  # a ledger from before row checksums: its rows have none
                self._db.execute("ALTER TABLE rows ADD COLUMN crc INTEGER")
            part_columns = {row[1] for row in self._db.execute("PRAGMA table_info(parts)")}
            for name, kind in PART_MARK_COLUMNS.items():
                if name not in part_columns:  # a ledger from before marks: its parts are checked once
                    self._db.execute(f"ALTER TABLE parts ADD COLUMN {name} {kind}")

    @classmethod
    def in_dir(cls, directory: Path, *, readonly: bool = False) -> Ledger:
        return cls(directory / LEDGER_FILE, readonly=readonly)

    def close(self) -> None:
        self._db.close()

    # -- setup ---------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def set_meta(self, values: dict[str, str]) -> None:
        with self._transaction():
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())

    def is_initialized(self) -> bool:
        return "initialized_at" in self.meta()

    def initialize(
        self,
        rows: Iterable[tuple[int, str]],
        finish: Callable[[], dict[str, str]],
        marks: Callable[[], Iterable[tuple[int, int, int, int | None]]] = tuple,
    ) -> int:
        """Insert every (position, id), then `marks()` (position, byte offset, line number, block
        crc32: gathered while `rows` is read) and `finish()`'s meta, in one transaction.

        One transaction means a kill during initialization (or `finish` refusing the
        input, e.g. for duplicate ids) leaves an empty ledger that the next run
        initializes again, never a half-listed job. Returns the row count.
        """
        ((cache_size,),) = self._db.execute("PRAGMA cache_size").fetchall()
        # random ids (derived ones are hashes) land all over the id index: with SQLite's 2 MiB
        # cache, 902k of them took 6.3 s to insert, with 64 MiB 4.1 s (sequential ids: no change)
        self._db.execute(f"PRAGMA cache_size = -{LISTING_CACHE_KIB}")
        try:
            with self._transaction():
                self._db.execute("DELETE FROM rows")
                count = self._insert_rows(rows)
                self._db.execute("DELETE FROM input_marks")
                self._db.executemany("INSERT INTO input_marks VALUES (?, ?, ?, ?)", marks())
                meta = {**finish(), "initialized_at": f"{time.time():.3f}", "total": str(count)}
                self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        finally:  # the job that follows runs with the usual cache
            self._db.execute(f"PRAGMA cache_size = {int(cache_size)}")
        return count

    def _insert_rows(self, rows: Iterable[tuple[int, str]]) -> int:
        """Insert (position, id) rows INSERT_ROWS_PER_STATEMENT to a statement: half the time of
        one statement per row at 902k rows. Returns the row count."""
        full = _insert_rows_statement(INSERT_ROWS_PER_STATEMENT)
        count = 0
        chunk: list[int | str] = []
        for row in rows:
            chunk += row
            if len(chunk) == 2 * INSERT_ROWS_PER_STATEMENT:
                self._db.execute(full, chunk)
                count += INSERT_ROWS_PER_STATEMENT
                chunk = []
        if chunk:
            self._db.execute(_insert_rows_statement(len(chunk) // 2), chunk)
            count += len(chunk) // 2
        return count

    def requeue_unfinished(self, *, include_failed: bool) -> int:
        """In-flight rows of a killed run (and failed ones if asked) become pending."""
        states = (RowState.IN_FLIGHT, RowState.FAILED) if include_failed else (RowState.IN_FLIGHT,)
        marks = ",".join("?" * len(states))
        with self._transaction():
            cursor = self._db.execute(
                f"UPDATE rows SET state = {RowState.PENDING} WHERE state IN ({marks})",
                [int(s) for s in states],
            )
        return cursor.rowcount

    def requeue_failed_by(self, error_prefixes: Sequence[str]) -> int:
        """Failed rows whose last error starts with one of `error_prefixes` become pending."""
        if not error_prefixes:
            return 0
        matches = " OR ".join("substr(last_error, 1, ?) = ?" for _ in error_prefixes)
        params = [value for prefix in error_prefixes for value in (len(prefix), prefix)]
        with self._transaction():
            cursor = self._db.execute(
                f"UPDATE rows SET state = {RowState.PENDING} WHERE state = {RowState.FAILED} AND ({matches})",
                params,
            )
        return cursor.rowcount

    def fail_unfinished(self, reason: str, below_position: int | None = None) -> int:
        """Rows not done or failed (below `below_position` if given) fail with `reason`: the job
        ends without a server to send them to; `--retry-failed` sends them again."""
        limit = (1 << 62) if below_position is None else below_position
        with self._transaction():
            cursor = self._db.execute(
                f"UPDATE rows SET state = {RowState.FAILED}, last_error = ? "
                f"WHERE state IN ({RowState.PENDING}, {RowState.IN_FLIGHT}) AND position < ?",
                (reason, limit),
            )
        return cursor.rowcount

    def input_marks(self) -> list[tuple[int, int, int, int | None]]:
        """Every (position, byte offset, line number, block crc32) mark, in input order."""
        query = "SELECT position, byte_offset, line_number, block_crc FROM input_marks ORDER BY position"
        return [
            (int(a), int(b), int(c), None if d is None else int(d)) for a, b, c, d in self._db.execute(query)
        ]

    def input_mark_before(self, position: int) -> tuple[int, int, int] | None:
        """The last (position, byte offset, line number) mark at or before `position`, if any."""
        try:
            found = self._db.execute(
                "SELECT position, byte_offset, line_number FROM input_marks WHERE position <= ? "
                "ORDER BY position DESC LIMIT 1",
                (position,),
            ).fetchone()
        except sqlite3.OperationalError:  # read-only, from before marks
            return None
        return None if found is None else (int(found[0]), int(found[1]), int(found[2]))

    def counts(self, below_position: int | None = None) -> dict[RowState, int]:
        """Rows per state (only positions below `below_position` if given)."""
        limit = (1 << 62) if below_position is None else below_position
        found = dict(
            self._db.execute("SELECT state, COUNT(*) FROM rows WHERE position < ? GROUP BY state", (limit,))
        )
        return {state: int(found.get(int(state), 0)) for state in RowState}

    def pending_positions(self) -> AbstractSet[int]:
        """The positions of the pending rows; a `PositionRange` when they are one run (a fresh
        job: building a set of 902k positions cost 0.27 s of its start)."""
        query = f"SELECT COUNT(*), MIN(position), MAX(position) FROM rows WHERE state = {RowState.PENDING}"
        count, first, last = self._db.execute(query).fetchone()
        if count and last - first + 1 == count:  # positions are unique: the run is every one of them
            return PositionRange(range(first, last + 1))
        query = f"SELECT position FROM rows WHERE state = {RowState.PENDING}"
        return {position for (position,) in self._db.execute(query)}

    # -- output parts --------------------------------------------------------

    def part_commits(self) -> dict[int, PartCommit]:
        try:
            query = "SELECT part, committed_bytes, rows, crc, mtime_ns, tail_start, tail_crc FROM parts"
            return {row[0]: PartCommit(*row) for row in self._db.execute(query)}
        except sqlite3.OperationalError as err:
            if "no such column" not in str(err):
                raise
            # read-only, from before marks
            rows = self._db.execute("SELECT part, committed_bytes, rows FROM parts").fetchall()
            return {part: PartCommit(part, size, count) for part, size, count in rows}

    def done_in_part(self, part: int) -> dict[str, int]:
        """id -> position of the rows the ledger has as done in `part`."""
        query = f"SELECT id, position FROM rows WHERE state = {RowState.DONE} AND part = ?"
        return {str(row_id): int(position) for row_id, position in self._db.execute(query, (part,))}

    def checksums_in_part(self, part: int) -> dict[str, int | None] | None:
        """id -> crc of the done rows of `part` (None: written before checksums); None for a
        ledger without the column (opened read-only before a job upgraded it)."""
        query = f"SELECT id, crc FROM rows WHERE state = {RowState.DONE} AND part = ?"
        try:
            return {str(row_id): crc for row_id, crc in self._db.execute(query, (part,))}
        except sqlite3.OperationalError as err:
            if "no such column" not in str(err):
                raise
            return None

    def requeue_lost(self, positions: Iterable[int], commit: PartCommit) -> None:
        """Rows whose part lost them go back to pending; the part's commit shrinks to `commit`."""
        with self._transaction():
            self._db.executemany(
                f"UPDATE rows SET state = {RowState.PENDING}, part = NULL, prompt_tokens = NULL, "
                "completion_tokens = NULL, flags = 0, done_at = NULL, crc = NULL WHERE position = ?",
                ((p,) for p in positions),
            )
            self._db.execute(PUT_PART, commit.as_row())

    def states_of(self, row_ids: Sequence[str]) -> dict[str, tuple[int, RowState]]:
        """id -> (position, state) for the ids the ledger knows."""
        found: dict[str, tuple[int, RowState]] = {}
        for start in range(0, len(row_ids), 500):
            chunk = row_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT id, position, state FROM rows WHERE id IN ({marks})"
            for row_id, position, state in self._db.execute(query, chunk):
                found[row_id] = (position, RowState(state))
        return found

    # -- progress ------------------------------------------------------------

    def apply(self, batch: LedgerBatch) -> None:
        """Apply gathered changes atomically (done rows must already be durable)."""
        if not batch:
            return
        with self._transaction():
            db = self._db
            # attempts count requests that ended: answered, failed or retried (a row sent back
            # because its server was taken out counts none; --max-attempts counts in memory,
            # where a 429/503 back-off spends none)
            db.executemany(
                f"UPDATE rows SET state = {RowState.IN_FLIGHT} "
                f"WHERE position = ? AND state != {RowState.DONE}",
                ((p,) for p in batch.started),
            )
            db.executemany(
                "UPDATE rows SET last_error = ?, attempts = attempts + 1 WHERE position = ?", batch.retried
            )
            db.executemany(
                f"UPDATE rows SET state = {RowState.PENDING} "
                f"WHERE position = ? AND state = {RowState.IN_FLIGHT}",
                ((p,) for p in sorted(batch.waiting)),
            )
            db.executemany(
                f"UPDATE rows SET state = {RowState.FAILED}, last_error = ?, attempts = attempts + 1 "
                f"WHERE position = ? AND state != {RowState.DONE}",
                batch.failed,
            )
            db.executemany(
                f"UPDATE rows SET state = {RowState.DONE}, part = ?, prompt_tokens = ?, "
                "completion_tokens = ?, flags = ?, done_at = ?, last_error = NULL, crc = ?, "
                "attempts = attempts + 1 WHERE position = ?",
                (
                    (d.part, d.prompt_tokens, d.completion_tokens, d.flags, d.done_at, d.crc, d.position)
                    for d in batch.done
                ),
            )
            db.executemany(PUT_PART, (c.as_row() for c in batch.parts))

    def failed_rows(self) -> list[tuple[str, int, str]]:
        """(id, attempts, last_error) of every failed row, in input order."""
        query = (
            f"SELECT id, attempts, COALESCE(last_error, '') FROM rows "
            f"WHERE state = {RowState.FAILED} ORDER BY position"
        )
        return [(str(a), int(b), str(c)) for a, b, c in self._db.execute(query)]

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """Read-only helper for the report's aggregate queries."""
        return self._db.execute(sql, params).fetchall()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


def _insert_rows_statement(rows: int) -> str:
    return "INSERT INTO rows (position, id) VALUES " + ",".join(["(?, ?)"] * rows)


class PositionRange(AbstractSet[int]):
    """A run of positions as a set, without one int object per position."""

    def __init__(self, positions: range) -> None:
        self._positions = positions

    def __contains__(self, position: object) -> bool:
        return position in self._positions

    def __iter__(self) -> Iterator[int]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)

    def __repr__(self) -> str:
        return f"PositionRange({self._positions!r})"


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on error (autocommit connection)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")
