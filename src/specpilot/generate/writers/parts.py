"""Output shards `DIR/data/part-NNNNN.jsonl` (and `DIR/flagged/`): batched durable appends and crash repair.

Rows are buffered in memory and written in batches; `flush()` writes, fsyncs and
only then returns the `DoneRecord`s and `PartCommit`s the caller hands to the ledger.
See `ledger/store.py` for the invariant this upholds, and `reconcile_parts` for how a
resumed job repairs whatever a kill left after the last committed byte.
"""

from __future__ import annotations

import json
import os
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from specpilot.errors import JobFailed
from specpilot.generate.ledger.store import DoneRecord, Ledger, LedgerBatch, PartCommit, RowState
from specpilot.generate.rows.validate import flag_bits

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


def split_commits(commits: dict[int, PartCommit], first_part: int) -> list[PartCommit]:
    """The commits of the split whose part ids start at `first_part`, in part order."""
    return sorted(
        (c for c in commits.values() if first_part <= c.part < first_part + SPLIT_PARTS), key=lambda c: c.part
    )


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
    crc: int


class PartWriter:
    """Appends finished rows to the newest part, rotating after `rows_per_part` rows."""

    def __init__(
        self, data_dir: Path, commits: dict[int, PartCommit], rows_per_part: int, first_part: int = 0
    ) -> None:
        self._data_dir = data_dir
        self._rows_per_part = rows_per_part
        self._first_part = first_part
        data_dir.mkdir(parents=True, exist_ok=True)
        mine = split_commits(commits, first_part)
        last = mine[-1] if mine else None
        #: crc32 of the part's bytes so far (its verified mark); None: read from the file at open
        self._crc: int | None = 0
        if last is not None and last.rows < rows_per_part:
            self._part, self._bytes, self._rows = last.part, last.committed_bytes, last.rows
            self._crc = last.crc
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
        self._buffer.append(
            _Pending(line, position, prompt_tokens, completion_tokens, flags, done_at, zlib.crc32(line))
        )

    def flush(self) -> LedgerBatch:
        """Write and fsync every buffered row; the batch says what is now durable."""
        batch = LedgerBatch.empty()
        pending, self._buffer = self._buffer, []
        start = 0
        while start < len(pending):
            room = self._rows_per_part - self._rows
            if room <= 0:
                self._close()
                self._part, self._bytes, self._rows, self._crc = self._part + 1, 0, 0, 0
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
        tail_start, tail_crc = self._bytes, self._crc
        self._crc = zlib.crc32(data, self._crc or 0)
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
                item.crc,
            )
            for item in items
        )
        mtime_ns = os.fstat(handle.fileno()).st_mtime_ns
        batch.parts.append(
            PartCommit(self._part, self._bytes, self._rows, self._crc, mtime_ns, tail_start, tail_crc)
        )

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
            if self._crc is None:  # a ledger from before marks: the mark starts from the bytes there
                self._crc = crc_of(path, self._bytes)
        return self._handle

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def close(self) -> None:
        self._close()


def damaged_parts(job_dir: Path, ledger: Ledger) -> list[str]:
    """The parts (split/name) now missing or shorter than their commit: deleted or cut
    while the job ran (its writer kept appending to the unlinked file)."""
    damaged = []
    for split in SPLITS:
        directory = job_dir / split.directory
        for commit in split_commits(ledger.part_commits(), split.first_part):
            path = part_path(directory, commit.part, split.first_part)
            if commit.committed_bytes and (not path.exists() or path.stat().st_size < commit.committed_bytes):
                damaged.append(f"{split.directory}/{path.name}")
    return damaged


@dataclass(frozen=True)
class DamagedRow:
    """A committed row found changed or gone: where it was and its id (None: unreadable)."""

    part: str  # split/part-NNNNN.jsonl
    line: int | None  # its line in the part, None when the row is no longer there at all
    row_id: str | None

    def describe(self) -> str:
        where = f"{self.part} line {self.line}" if self.line is not None else self.part
        what = f"row {self.row_id}" if self.row_id is not None else "a line that is no row of this job"
        gone = "is missing" if self.line is None else "changed since it was written (checksum mismatch)"
        return f"{where}: {what} {gone}"


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
    #: committed rows whose line changed since (checksum mismatch): taken out, sent again
    changed_rows: int = 0
    changed_parts: tuple[str, ...] = ()
    #: each changed line, and each row no longer in its part because of it
    damaged: tuple[DamagedRow, ...] = ()
    #: parts whose every byte was read (no verified mark, or the mark did not match)
    scanned_parts: int = 0


def reconcile_parts(
    data_dir: Path, ledger: Ledger, first_part: int = 0, *, full: bool = False
) -> ReconcileResult:
    """Repair every part of one split (`data_dir`, part ids from `first_part`) so the ledger
    invariant holds again: first parts that lost committed rows, then what a kill left, then
    committed bytes that changed.

    A part deleted or cut short since keeps its intact prefix; its other rows go back to
    pending and are generated again (`_requeue_lost_rows`).

    Past `committed_bytes` a part may hold whole rows that were fsynced but not yet
    marked done (adopted: marked done, not generated again), rows the ledger already
    has as done or that appear twice (dropped), and a torn last line (dropped). If
    anything is dropped the tail is rewritten: truncate to the committed length,
    write the adopted rows back, fsync, then commit. A kill in between only un-adopts
    those rows, which are then generated again: nothing is ever duplicated.

    Committed bytes are checked by their verified mark (`_check_marks`): metadata for every
    part and the last commit's bytes of the newest, so a start costs what is left, not what
    is done; `full=True` (`specpilot verify`) reads every byte of every part.
    """
    requeued, lost, missing = _requeue_lost_rows(data_dir, ledger, first_part)
    commits = ledger.part_commits()
    adopted = dropped = truncated = 0
    for part, path in list_parts(data_dir, first_part).items():
        commit = commits.get(part, PartCommit(part, 0, 0, 0))
        size_bytes = path.stat().st_size
        if size_bytes == commit.committed_bytes:
            continue
        with path.open("rb") as handle:
            handle.seek(commit.committed_bytes)
            tail = handle.read()  # past the last commit: at most what one flush wrote
        keep, records = _adoptable(tail, ledger, part, commit)
        kept = b"".join(keep)
        dropped += tail.count(b"\n") + (0 if tail.endswith(b"\n") else 1) - len(keep)
        if len(kept) != len(tail):
            with path.open("r+b") as handle:
                handle.truncate(commit.committed_bytes)
                handle.seek(commit.committed_bytes)
                handle.write(kept)
                handle.flush()
                os.fsync(handle.fileno())
            truncated += len(tail) - len(kept)
        crc = None if commit.crc is None else zlib.crc32(kept, commit.crc)
        new_commit = PartCommit(
            part,
            commit.committed_bytes + len(kept),
            commit.rows + len(keep),
            crc,
            path.stat().st_mtime_ns,
            commit.committed_bytes,
            commit.crc,
        )
        ledger.apply(LedgerBatch([], [], [], records, [new_commit]))
        adopted += len(keep)
    changed, changed_parts, damaged, scanned = _check_marks(data_dir, ledger, first_part, full=full)
    return ReconcileResult(
        adopted, dropped, truncated, requeued, lost, changed, changed_parts, (*missing, *damaged), scanned
    )


def _requeue_lost_rows(
    data_dir: Path, ledger: Ledger, first_part: int
) -> tuple[int, tuple[str, ...], list[DamagedRow]]:
    """Parts deleted or cut short since: keep their intact prefix, send the other rows again.

    Bytes [0, committed_bytes) held exactly the part's done rows, so the complete lines
    still there are rows the ledger knows; the part is truncated to them (fsynced) before
    the ledger moves the rest back to pending. A kill in between only repeats this.
    """
    requeued = 0
    lost: list[str] = []
    missing: list[DamagedRow] = []
    for commit in split_commits(ledger.part_commits(), first_part):
        part = commit.part
        path = part_path(data_dir, part, first_part)
        size_bytes = path.stat().st_size if path.exists() else 0
        if size_bytes >= commit.committed_bytes:
            continue
        done = ledger.done_in_part(part)
        kept_bytes, kept_ids = _intact_prefix(path, done) if size_bytes else (0, set())
        if path.exists():
            with path.open("r+b") as handle:
                handle.truncate(kept_bytes)
                os.fsync(handle.fileno())
        gone = {row_id: position for row_id, position in done.items() if row_id not in kept_ids}
        ledger.requeue_lost(gone.values(), PartCommit(part, kept_bytes, len(kept_ids)))
        requeued += len(gone)
        lost.append(path.name)
        missing += [DamagedRow(f"{data_dir.name}/{path.name}", None, row_id) for row_id in gone]
    return requeued, tuple(lost), missing


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
    parsed = _complete_rows(tail)
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
        keep.append(line)
        records.append(_done_record(known[0], part, line, row.get("meta", {}), now))
    return keep, records


def _complete_rows(tail: bytes) -> list[tuple[bytes, dict[str, Any]]]:
    """The complete lines of `tail` that are rows (an id and a conversation), each with its row."""
    parsed: list[tuple[bytes, dict[str, Any]]] = []
    for raw in tail.split(b"\n")[:-1]:  # the last piece is torn (or empty)
        try:
            row = json.loads(raw)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("id"), str) and row.get("conversations"):
            parsed.append((raw + b"\n", row))
    return parsed


def _done_record(position: int, part: int, line: bytes, meta: dict[str, Any], now: float) -> DoneRecord:
    """The ledger's record of a row found written in `part` (its line, its meta's counts)."""
    return DoneRecord(
        position,
        part,
        int(meta.get("prompt_tokens") or 0),
        int(meta.get("completion_tokens") or 0),
        flag_bits(meta.get("flags") or ()),
        now,
        zlib.crc32(line),
    )


#: the id a row's line starts with (the writer puts it first), as its JSON string
_LINE_ID = re.compile(rb'^\{\s*"id"\s*:\s*("(?:[^"\\]|\\.)*")')


def line_id(line: bytes) -> str | None:
    """The id of a part's line (read from its start, else from the whole line), or None
    if the line is not a row."""
    match = _LINE_ID.match(line)
    try:
        row = json.loads(match.group(1)) if match else json.loads(line).get("id")
    except (ValueError, AttributeError, RecursionError):
        return None
    return row if isinstance(row, str) else None


def crc_of(path: Path, size_bytes: int, start_bytes: int = 0, crc: int = 0) -> int:
    """zlib.crc32 of bytes [start_bytes, size_bytes) of `path`, continuing from `crc`; streamed."""
    with path.open("rb") as handle:
        handle.seek(start_bytes)
        left = size_bytes - start_bytes
        while left > 0:
            chunk = handle.read(min(left, CRC_CHUNK_BYTES))
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
            left -= len(chunk)
    return crc


CRC_CHUNK_BYTES = 1 << 20


def _mark_holds(path: Path, commit: PartCommit, newest: bool) -> bool:
    """The part's size and mtime are what its last commit recorded; for the newest part (the
    one a crash can have touched) the last commit's bytes are read back too."""
    if commit.crc is None or commit.mtime_ns is None or commit.tail_crc is None:
        return False
    stat = path.stat()
    if stat.st_size != commit.committed_bytes or stat.st_mtime_ns != commit.mtime_ns:
        return False
    return (
        not newest or crc_of(path, commit.committed_bytes, commit.tail_start, commit.tail_crc) == commit.crc
    )


def _check_marks(
    data_dir: Path, ledger: Ledger, first_part: int, *, full: bool
) -> tuple[int, tuple[str, ...], tuple[DamagedRow, ...], int]:
    """Committed parts whose mark does not hold (or all, with `full`) are read line by line;
    lines whose checksum no longer matches (a changed byte) go out of the part and their rows
    back to pending. The part is rewritten (temp file, fsync, rename) before the ledger moves
    the rows: a kill in between leaves a part shorter than its commit, which
    `_requeue_lost_rows` repairs by the ids still there. Memory: one line and one part's ids."""
    changed = scanned = 0
    parts: list[str] = []
    damaged: list[DamagedRow] = []
    commits = split_commits(ledger.part_commits(), first_part)
    for commit in commits:
        path = part_path(data_dir, commit.part, first_part)
        if not path.exists() or (not full and _mark_holds(path, commit, commit is commits[-1])):
            continue
        scanned += 1
        found = _drop_changed_lines(data_dir, ledger, commit, path)
        if found is not None:
            changed += found[0]
            damaged += found[1]
            parts.append(path.name)
    return changed, tuple(parts), tuple(damaged), scanned


def _drop_changed_lines(
    data_dir: Path, ledger: Ledger, commit: PartCommit, path: Path
) -> tuple[int, list[DamagedRow]] | None:
    """Read one committed part back: None when every line matches its checksum (the mark is
    renewed); else the part rewritten without the changed lines and their rows requeued: how
    many rows, and each damaged row (by line where one was read, else by id alone)."""
    expected = ledger.checksums_in_part(commit.part) or {}
    crc, bad = _scan(path, commit.committed_bytes, expected)
    if not bad:
        ledger.requeue_lost((), _marked(commit.part, path, commit.committed_bytes, commit.rows, crc))
        return None
    kept_bytes, kept_ids, crc = _rewrite_keeping(path, commit.committed_bytes, expected)
    fsync_dir(data_dir)
    missing = {row_id: p for row_id, p in ledger.done_in_part(commit.part).items() if row_id not in kept_ids}
    ledger.requeue_lost(missing.values(), _marked(commit.part, path, kept_bytes, len(kept_ids), crc))
    name = f"{data_dir.name}/{path.name}"
    named = {row_id for _, row_id in bad}
    damaged = [DamagedRow(name, line, row_id) for line, row_id in bad]
    damaged += [DamagedRow(name, None, row_id) for row_id in missing if row_id not in named]
    return len(missing), damaged


def _marked(part: int, path: Path, committed_bytes: int, rows: int, crc: int) -> PartCommit:
    """A commit of what `path` holds now, as verified."""
    return PartCommit(part, committed_bytes, rows, crc, path.stat().st_mtime_ns, committed_bytes, crc)


def _line_ok(line: bytes, expected: dict[str, int | None], seen: set[str]) -> str | None:
    """The line's id if it is a row of this part, once, with the checksum it was written with."""
    row_id = line_id(line)
    if row_id is None or row_id in seen or row_id not in expected:
        return None
    crc = expected[row_id]
    return row_id if crc is None or crc == zlib.crc32(line) else None


def _committed_lines(path: Path, committed_bytes: int) -> Iterator[bytes]:
    left = committed_bytes
    with path.open("rb") as handle:
        for line in handle:
            if left <= 0:
                return
            yield line[:left]
            left -= len(line)


def _scan(
    path: Path, committed_bytes: int, expected: dict[str, int | None]
) -> tuple[int, list[tuple[int, str | None]]]:
    """(crc32 of the committed bytes, (line number, id) of each line that is not a good row)."""
    crc = 0
    seen: set[str] = set()
    bad: list[tuple[int, str | None]] = []
    for number, line in enumerate(_committed_lines(path, committed_bytes), start=1):
        crc = zlib.crc32(line, crc)
        row_id = _line_ok(line, expected, seen)
        if row_id is None:
            bad.append((number, line_id(line)))
        else:
            seen.add(row_id)
    return crc, bad


def _rewrite_keeping(
    path: Path, committed_bytes: int, expected: dict[str, int | None]
) -> tuple[int, set[str], int]:
    """Rewrite `path` with only its good committed lines; (bytes, ids, crc32) kept."""
    tmp = path.with_name(path.name + ".tmp")
    kept_bytes = crc = 0
    seen: set[str] = set()
    with tmp.open("wb") as out:
        for line in _committed_lines(path, committed_bytes):
            row_id = _line_ok(line, expected, seen)
            if row_id is None:
                continue
            seen.add(row_id)
            out.write(line)
            kept_bytes += len(line)
            crc = zlib.crc32(line, crc)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return kept_bytes, seen, crc
