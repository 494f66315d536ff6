"""The dispatcher's bookkeeping: the rows held and waiting, the requests out, the servers being
probed, and whether the job is stopping."""

from __future__ import annotations

import heapq
import signal
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from specpilot.generate.dispatch.client import RequestFailed
from specpilot.generate.rows.output import TurnResult
from specpilot.generate.rows.types import PromptRow, RejectedRow


@dataclass
class RowQueue:
    """Rows read from the input and not finished yet, and which of them wait to be sent."""

    source: Iterator[PromptRow | RejectedRow]
    window: int  # rows held in memory at most: the input is read as rows finish
    rows: dict[int, PromptRow] = field(default_factory=dict)
    ready: deque[int] = field(default_factory=deque)
    waiting: list[tuple[float, int]] = field(default_factory=list)  # heap of (monotonic due time, position)
    input_done: bool = False

    def refill(self) -> None:
        while not self.input_done and len(self.rows) < self.window:
            row = next(self.source, None)
            if row is None:
                self.input_done = True
                return
            if not isinstance(row, PromptRow):
                continue  # rejected when the job was listed; never pending
            self.rows[row.position] = row
            self.ready.append(row.position)

    def release_due(self, now: float) -> None:
        while self.waiting and self.waiting[0][0] <= now:
            self.ready.append(heapq.heappop(self.waiting)[1])

    def retry_at(self, due: float, position: int) -> None:
        heapq.heappush(self.waiting, (due, position))


@dataclass
class InFlight:
    """Per row sent: target turns done so far, attempts spent, when its request went out.

    Turns are kept in memory only: a row is written and committed once, whole; after a
    kill its turns are generated again.
    """

    turns_done: dict[int, list[TurnResult]] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    sent_at: dict[int, float] = field(default_factory=dict)
    #: 429/503 answers a row backed off from, no attempt spent (up to OVERLOAD_RETRIES_PER_ROW)
    overloads: dict[int, int] = field(default_factory=dict)

    def forget(self, position: int) -> None:
        self.turns_done.pop(position, None)
        self.sent_at.pop(position, None)
        self.overloads.pop(position, None)


@dataclass
class Probes:
    """Servers being probed, and the rows whose connection failure waits on that probe."""

    probing: set[str] = field(default_factory=set)
    parked: dict[str, list[tuple[int, RequestFailed]]] = field(default_factory=dict)


@dataclass
class Stopping:
    reason: str | None = None
    now: bool = False  # False while stopping: let the requests in flight finish
    signalled: bool = False  # a signal stopped it (a job that ran generate exits as a signal ends it)

    def stop(self, reason: str) -> None:
        """Stop now: the requests in flight are cancelled (and sent again by the next run)."""
        self.reason, self.now = reason, True

    def drain(self, reason: str) -> None:
        """Send nothing new, let the requests in flight finish and commit, then end with `reason`
        (unless the job is already stopping for another)."""
        if self.reason is None:
            self.reason = reason

    def interrupted(self, sig: signal.Signals) -> bool:
        """First signal: send nothing new, let requests in flight finish (True: say so).
        Second: stop now."""
        self.signalled = True
        if self.reason is None:
            self.reason = f"interrupted by {sig.name}; run the same command again to resume"
            return True
        self.now = True
        return False
