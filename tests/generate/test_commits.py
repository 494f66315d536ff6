"""Ledger commits (dispatch/commits.py) without a job: what a flush hands the ledger, the last
flush at the end, the wait between flushes, and the clock-jump watch."""

from __future__ import annotations

from typing import cast

import pytest

from specpilot.generate.dispatch.commits import (
    CLOCK_JUMP_S,
    FLUSH_COST_FACTOR,
    FLUSH_MIN_WAIT_S,
    ClockWatch,
    Committer,
    flush_wait_s,
)
from specpilot.generate.ledger.store import Ledger, LedgerBatch
from specpilot.generate.writers.parts import CLEAN, PartWriter


class Writer:
    """A part writer's flush and close, recorded."""

    def __init__(self) -> None:
        self.closed = False

    def flush(self) -> LedgerBatch:
        return LedgerBatch([], [], [], [], [])

    def close(self) -> None:
        self.closed = True


class Book:
    """The ledger's `apply`, recorded."""

    def __init__(self) -> None:
        self.applied: list[LedgerBatch] = []

    def apply(self, batch: LedgerBatch) -> None:
        self.applied.append(batch)


def _committer(take_batch: LedgerBatch | Exception) -> tuple[Committer, Writer, Book]:
    def take() -> LedgerBatch:
        if isinstance(take_batch, Exception):
            raise take_batch
        return take_batch

    writer, book = Writer(), Book()
    writers = {CLEAN: cast(PartWriter, writer)}
    return Committer(cast(Ledger, book), writers, take, lambda _: None), writer, book


def test_a_flush_commits_the_row_changes_with_the_answers_in_one_batch() -> None:
    batch = LedgerBatch([3], [("HTTP 500", 4)], [], [], [])
    committer, _, book = _committer(batch)
    committer.flush()
    assert book.applied == [batch]


def test_the_last_flush_failing_after_the_job_failed_hides_nothing_and_still_closes_the_writers() -> None:
    committer, writer, _ = _committer(OSError("disk full"))
    committer.close(job_failed=True)  # the job's own error is what is raised
    assert writer.closed
    committer, writer, _ = _committer(OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):
        committer.close(job_failed=False)
    assert writer.closed


def test_flushes_wait_ten_times_what_the_last_took_within_the_bounds() -> None:
    assert flush_wait_s(0.0, 1.0) == FLUSH_MIN_WAIT_S
    assert flush_wait_s(0.01, 1.0) == pytest.approx(FLUSH_COST_FACTOR * 0.01)
    assert flush_wait_s(5.0, 1.0) == 1.0


def test_a_clock_jump_is_reported_when_larger_than_any_before() -> None:
    clock = ClockWatch(offset_s=1000.0)
    assert clock.look(1000.0 + CLOCK_JUMP_S, 0.0) is None  # within what NTP may do
    assert clock.look(1000.0 - 2 * CLOCK_JUMP_S, 0.0) == -2 * CLOCK_JUMP_S
    assert clock.look(1000.0 + 1.5 * CLOCK_JUMP_S, 0.0) is None  # smaller than the one seen
    assert clock.look(1000.0 + 3 * CLOCK_JUMP_S, 10.0) == 3 * CLOCK_JUMP_S - 10.0
    assert clock.jump_s == 3 * CLOCK_JUMP_S - 10.0
