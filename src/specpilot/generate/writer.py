"""Output shards `DIR/data/part-NNNNN.jsonl`: batched durable appends and crash repair.

Rows are buffered in memory and written in batches; `flush()` writes, fsyncs and
only then returns the `DoneRecord`s and `PartCommit`s the caller hands to the ledger.
See `ledger.py` for the invariant this upholds, and `reconcile_parts` for how a
resumed job repairs whatever a kill left after the last committed byte.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from specpilot.errors import JobFailed
from specpilot.generate.ledger import DoneRecord, Ledger, LedgerBatch, PartCommit, RowState
from specpilot.generate.validate import flag_bits

DATA_DIR = "data"
FLAGGED_DIR = "flagged"
PART_NAME = "part-{:05d}.jsonl"
PART_PATTERN = re.compile(r"^part-(\d{5,})\.jsonl$")


@dataclass(frozen=True)
class Split:
    """A folder of parts. The ledger numbers all parts in one space, so each split owns a range."""

    directory: str
    first_part: int


SPLIT_PARTS = 1 << 32
CLEAN = Split(DATA_DIR, 0)
FLAGGED = Split(FLAGGED_DIR, SPLIT_PARTS)  # rows with a flag (truncated, empty, ...): not for training as is
SPLITS = (CLEAN, FLAGGED)


def part_path(directory: Path, part: int, first_part: int = 0) -> Path:
    return directory / PART_NAME.format(part - first_part)


def list_parts(directory: Path, first_part: int = 0) -> dict[int, Path]:
    """Ledger part id -> file, for the parts in `directory` (a split starting at `first_part`)."""
    found = {}
    for path in directory.glob("part-*.jsonl"):
        match = PART_PATTERN.match(path.name)
        if match:
            found[first_part + int(match.group(1))] = path
    return dict(sorted(found.items()))


def split_parts(job_dir: Path) -> dict[int, Path]:
    """Every part of the job, clean and flagged, by ledger part id."""
    found: dict[int, Path] = {}
    for split in SPLITS:
        found.update(list_parts(job_dir / split.directory, split.first_part))
    return found


def fsync_dir(directory: Path) -> None:
    """Make a new directory entry durable (a new part file must not vanish on power loss)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class _Pending:
    line: bytes
    position: int
    prompt_tokens: int
    completion_tokens: int
    flags: int
    done_at: float


class PartWriter:
    """Appends finished rows to the newest part, rotating after `rows_per_part` rows."""

    def __init__(
        self, data_dir: Path, commits: dict[int, PartCommit], rows_per_part: int, first_part: int = 0
    ) -> None:
        self._data_dir = data_dir
        self._rows_per_part = rows_per_part
        self._first_part = first_part
        data_dir.mkdir(parents=True, exist_ok=True)
        mine = [c for c in commits.values() if first_part <= c.part < first_part + SPLIT_PARTS]
        last = max(mine, key=lambda c: c.part, default=None)
        if last is not None and last.rows < rows_per_part:
            self._part, self._bytes, self._rows = last.part, last.committed_bytes, last.rows
        else:
            self._part = first_part if last is None else last.part + 1
            self._bytes, self._rows = 0, 0
        self._handle: IO[bytes] | None = None
        self._buffer: list[_Pending] = []

    def __len__(self) -> int:
        return len(self._buffer)

    def add(
        self,
        row: dict[str, Any],
        position: int,
        prompt_tokens: int,
        completion_tokens: int,
        flags: int,
        done_at: float,
    ) -> None:
        line = json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        self._buffer.append(_Pending(line, position, prompt_tokens, completion_tokens, flags, done_at))

    def flush(self) -> LedgerBatch:
        """Write and fsync every buffered row; the batch says what is now durable."""
        batch = LedgerBatch.empty()
        pending, self._buffer = self._buffer, []
        start = 0
        while start < len(pending):
            room = self._rows_per_part - self._rows
            if room <= 0:
                self._close()
                self._part, self._bytes, self._rows = self._part + 1, 0, 0
                continue
            chunk = pending[start : start + room]
            self._append(chunk, batch)
            start += len(chunk)
        return batch

    def _append(self, items: list[_Pending], batch: LedgerBatch) -> None:
        handle = self._open()
        data = b"".join(item.line for item in items)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
        self._bytes += len(data)
        self._rows += len(items)
        batch.done.extend(
            DoneRecord(
                item.position,
                self._part,
                item.prompt_tokens,
                item.completion_tokens,
                item.flags,
                item.done_at,
            )
            for item in items
        )
        batch.parts.append(PartCommit(self._part, self._bytes, self._rows))

    def _open(self) -> IO[bytes]:
        if self._handle is None:
            path = part_path(self._data_dir, self._part, self._first_part)
            is_new = not path.exists()
            self._handle = path.open("ab")
            if self._handle.tell() != self._bytes:
                raise JobFailed(
                    f"{path} is {self._handle.tell()} bytes, ledger expects "
                    f"{self._bytes}; was it changed while the job ran?"
                )
            if is_new:
                fsync_dir(self._data_dir)
        return self._handle

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def close(self) -> None:
        self._close()


@dataclass(frozen=True)
class ReconcileResult:
    """What a resume found after the committed bytes of the parts."""

    adopted_rows: int
    dropped_rows: int
    truncated_bytes: int


def reconcile_parts(data_dir: Path, ledger: Ledger, first_part: int = 0) -> ReconcileResult:
    """Repair every part after a kill so the ledger invariant holds again.

    Past `committed_bytes` a part may hold whole rows that were fsynced but not yet
    marked done (adopted: marked done, not generated again), rows the ledger already
    has as done or that appear twice (dropped), and a torn last line (dropped). If
    anything is dropped the tail is rewritten: truncate to the committed length,
    write the adopted rows back, fsync, then commit. A kill in between only un-adopts
    those rows, which are then generated again: nothing is ever duplicated.
    """
    commits = ledger.part_commits()
    adopted = dropped = truncated = 0
    for part, path in list_parts(data_dir, first_part).items():
        commit = commits.get(part, PartCommit(part, 0, 0))
        size_bytes = path.stat().st_size
        if size_bytes < commit.committed_bytes:
            raise JobFailed(
                f"{path} is {size_bytes} bytes but the ledger has {commit.committed_bytes} bytes of it as "
                "written: the output was truncated or replaced since; restore the file, or start over "
                "with a new --output folder",
            )
        if size_bytes == commit.committed_bytes:
            continue
        with path.open("rb") as handle:
            handle.seek(commit.committed_bytes)
            tail = handle.read()
        keep, records = _adoptable(tail, ledger, part, commit)
        kept_bytes = sum(len(line) for line in keep)
        dropped += tail.count(b"\n") + (0 if tail.endswith(b"\n") else 1) - len(keep)
        if kept_bytes != len(tail):
            with path.open("r+b") as handle:
                handle.truncate(commit.committed_bytes)
                handle.seek(commit.committed_bytes)
                handle.write(b"".join(keep))
                handle.flush()
                os.fsync(handle.fileno())
            truncated += len(tail) - kept_bytes
        new_commit = PartCommit(part, commit.committed_bytes + kept_bytes, commit.rows + len(keep))
        ledger.apply(LedgerBatch([], [], [], records, [new_commit]))
        adopted += len(keep)
    return ReconcileResult(adopted, dropped, truncated)


def _adoptable(
    tail: bytes, ledger: Ledger, part: int, commit: PartCommit
) -> tuple[list[bytes], list[DoneRecord]]:
    """The complete, valid lines of `tail` whose ids the ledger has but not as done."""
    parsed: list[tuple[bytes, dict[str, Any]]] = []
    for raw in tail.split(b"\n")[:-1]:  # the last piece is torn (or empty)
        try:
            row = json.loads(raw)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("id"), str) and row.get("conversations"):
            parsed.append((raw + b"\n", row))
    states = ledger.states_of([row["id"] for _, row in parsed])
    keep: list[bytes] = []
    records: list[DoneRecord] = []
    seen: set[str] = set()
    now = time.time()
    for line, row in parsed:
        known = states.get(row["id"])
        if known is None or known[1] == RowState.DONE or row["id"] in seen:
            continue
        seen.add(row["id"])
        meta = row.get("meta", {})
        keep.append(line)
        records.append(
            DoneRecord(
                known[0],
                part,
                int(meta.get("prompt_tokens") or 0),
                int(meta.get("completion_tokens") or 0),
                flag_bits(meta.get("flags") or ()),
                now,
            )
        )
    return keep, records
