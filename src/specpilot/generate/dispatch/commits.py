"""Committing a job's progress: answers made durable in their part files, then committed with
the batch of other row changes to the ledger, as often as the disk allows; and a watch on the
wall clock, which rows' done_at follow and which can jump."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specpilot.generate.ledger.report import CLOCK_JUMP_KEY
from specpilot.generate.ledger.store import Ledger, LedgerBatch
from specpilot.generate.writers.parts import PartWriter, Split

#: wall clock moving this far from the monotonic clock is a jump (NTP slews far less)
CLOCK_JUMP_S = 60.0
#: flushing takes at most about 1/this of the job's time (fsync and a ledger commit each)
FLUSH_COST_FACTOR = 10
FLUSH_MIN_WAIT_S = 0.02


@dataclass
class ClockWatch:
    """Wall clock minus monotonic clock at the start, and the largest jump from it seen."""

    offset_s: float = field(default_factory=lambda: time.time() - time.monotonic())
    jump_s: float = 0.0  # either way

    def look(self, wall_s: float, monotonic_s: float) -> float | None:
        """A jump larger than CLOCK_JUMP_S and than any seen before, or None."""
        jump_s = wall_s - monotonic_s - self.offset_s
        if abs(jump_s) > CLOCK_JUMP_S and abs(jump_s) > abs(self.jump_s):
            self.jump_s = jump_s
            return jump_s
        return None


def flush_wait_s(flush_took_s: float, interval_s: float) -> float:
    """The wait before the next flush: FLUSH_COST_FACTOR times what the last one took, within
    FLUSH_MIN_WAIT_S and --flush-interval-s."""
    return min(interval_s, max(FLUSH_MIN_WAIT_S, FLUSH_COST_FACTOR * flush_took_s))


class Committer:
    """Flushes the writers and commits their rows with the row changes to the ledger."""

    def __init__(
        self,
        ledger: Ledger,
        writers: dict[Split, PartWriter],
        take_batch: Callable[[], LedgerBatch],
        say: Callable[[str], None],
    ) -> None:
        """`take_batch`: the row changes since the last flush (started, retried, failed)."""
        self.ledger, self.writers, self._take_batch, self._say = ledger, writers, take_batch, say
        self.clock = ClockWatch()

    def flush(self) -> None:
        """Make answers durable, then commit them with the other changes to the ledger."""
        batch = self._take_batch()
        for writer in self.writers.values():
            durable = writer.flush()
            batch.done += durable.done
            batch.parts += durable.parts
        self.ledger.apply(batch)

    def close(self, *, job_failed: bool) -> None:
        """The last flush, then the writers closed, whatever happens."""
        try:
            self.flush()
        except Exception:
            # The job already failed (its error is being raised): a flush failing the
            # same way must not hide it. Unflushed rows stay in flight and are sent again.
            if not job_failed:
                raise
        finally:
            for writer in self.writers.values():
                writer.close()

    async def loop(self, interval_s: float, tick: Callable[[], None]) -> None:
        """Commit answers about as they arrive, as often as the disk allows (`flush_wait_s`),
        so a killed driver loses little more than its requests in flight; `tick` about every
        `interval_s`, after a flush."""
        wait_s = interval_s
        ticked = time.monotonic()
        while True:
            await asyncio.sleep(wait_s)
            self._watch_clock()
            started = time.monotonic()
            self.flush()
            now = time.monotonic()
            wait_s = flush_wait_s(now - started, interval_s)
            if now - ticked >= interval_s:
                ticked = now
                tick()

    def _watch_clock(self) -> None:
        jump_s = self.clock.look(time.time(), time.monotonic())
        if jump_s is not None:
            self.ledger.set_meta({CLOCK_JUMP_KEY: f"{jump_s:.0f}"})  # `report` warns later too
            self._say(
                f"the system clock jumped by {jump_s:+.0f} s: time totals from the ledger are off by as much"
            )
