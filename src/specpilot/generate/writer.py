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
PART_NAME = "part-{:05d}.jsonl"
PART_PATTERN = re.compile(r"^part-(\d{5,})\.jsonl$")


def part_path(data_dir: Path, part: int) -> Path:
    return data_dir / PART_NAME.format(part)


def list_parts(data_dir: Path) -> dict[int, Path]:
    found = {}
    for path in data_dir.glob("part-*.jsonl"):
        match = PART_PATTERN.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


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

    def __init__(self, data_dir: Path, commits: dict[int, PartCommit], rows_per_part: int) -> None:
        self._data_dir = data_dir
        self._rows_per_part = rows_per_part
        data_dir.mkdir(parents=True, exist_ok=True)
        last = max(commits.values(), key=lambda c: c.part, default=None)
        if last is not None and last.rows < rows_per_part:
            self._part, self._bytes, self._rows = last.part, last.committed_bytes, last.rows
        else:
            self._part = 0 if last is None else last.part + 1
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
            path = part_path(self._data_dir, self._part)
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
    #: rows marked done whose part was deleted or cut short: sent again
    requeued_rows: int = 0
    #: the parts that lost rows (missing or shorter than the ledger says)
    lost_parts: tuple[str, ...] = ()


def reconcile_parts(data_dir: Path, ledger: Ledger) -> ReconcileResult:
    """Repair every part after a kill so the ledger invariant holds again.

    Past `committed_bytes` a part may hold whole rows that were fsynced but not yet
    marked done (adopted: marked done, not generated again), rows the ledger already
    has as done or that appear twice (dropped), and a torn last line (dropped). If
    anything is dropped the tail is rewritten: truncate to the committed length,
    write the adopted rows back, fsync, then commit. A kill in between only un-adopts
    those rows, which are then generated again: nothing is ever duplicated.
    """
    requeued, lost = _requeue_lost_rows(data_dir, ledger)
    commits = ledger.part_commits()
    adopted = dropped = truncated = 0
    for part, path in list_parts(data_dir).items():
        commit = commits.get(part, PartCommit(part, 0, 0))
        size_bytes = path.stat().st_size
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
    return ReconcileResult(adopted, dropped, truncated, requeued, lost)


def _requeue_lost_rows(data_dir: Path, ledger: Ledger) -> tuple[int, tuple[str, ...]]:
    """Parts deleted or cut short since: keep their intact prefix, send the other rows again.

    Bytes [0, committed_bytes) held exactly the part's done rows, so the complete lines
    still there are rows the ledger knows; the part is truncated to them (fsynced) before
    the ledger moves the rest back to pending. A kill in between only repeats this.
    """
    requeued = 0
    lost: list[str] = []
    for part, commit in sorted(ledger.part_commits().items()):
        path = part_path(data_dir, part)
        size_bytes = path.stat().st_size if path.exists() else 0
        if size_bytes >= commit.committed_bytes:
            continue
        done = ledger.done_in_part(part)
        kept_bytes, kept_ids = _intact_prefix(path, done) if size_bytes else (0, set())
        if path.exists():
            with path.open("r+b") as handle:
                handle.truncate(kept_bytes)
                os.fsync(handle.fileno())
        positions = [position for row_id, position in done.items() if row_id not in kept_ids]
        ledger.requeue_lost(positions, PartCommit(part, kept_bytes, len(kept_ids)))
        requeued += len(positions)
        lost.append(path.name)
    return requeued, tuple(lost)


def _intact_prefix(path: Path, done: dict[str, int]) -> tuple[int, set[str]]:
    """Length and ids of the leading complete lines that are done rows of this part."""
    kept_bytes = 0
    ids: set[str] = set()
    with path.open("rb") as handle:
        for raw in handle:
            try:
                row = json.loads(raw) if raw.endswith(b"\n") else None
            except ValueError:
                row = None
            row_id = row.get("id") if isinstance(row, dict) else None
            if row_id not in done or row_id in ids:
                break
            ids.add(row_id)
            kept_bytes += len(raw)
    return kept_bytes, ids


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
