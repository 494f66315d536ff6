"""The request timeout: a request older than --request-timeout-s is cancelled, and its row
fails that attempt as a timeout.

The session has no per-request timer (see client.open_session: one costs 5-10% of the CPU
a request takes); this watchdog measures each request from when it was sent, so a server
that drip-feeds an answer (a byte now and then, never the end) cannot hold a row forever.
"""

from __future__ import annotations

from collections.abc import Iterable

from specpilot.generate.dispatch.client import FailureKind, RequestFailed
from specpilot.generate.dispatch.servers import Server

#: how often the watchdog looks: a request may outlive the timeout by up to this
LOOK_EVERY_S = 1.0


class RequestWatchdog:
    """Cancels overdue requests and remembers which cancels were its own."""

    def __init__(self, limit_s: float, sent_at: dict[int, float]) -> None:
        """`sent_at`: position -> monotonic time its current request went out."""
        self.limit_s, self.sent_at = limit_s, sent_at
        self.overdue: set[int] = set()  # cancelled by the timeout, not yet seen by their attempt
        self._looked_at: float | None = None

    def look(self, now: float, servers: Iterable[Server]) -> None:
        """Cancel the requests older than the limit; at most once per LOOK_EVERY_S."""
        if self._looked_at is None:
            self._looked_at = now
        if now - self._looked_at < LOOK_EVERY_S:
            return
        self._looked_at = now
        for server in servers:
            for position, task in server.in_flight.items():
                if now - self.sent_at.get(position, now) > self.limit_s and position not in self.overdue:
                    self.overdue.add(position)
                    task.cancel()

    def settle(self, position: int) -> bool:
        """The row's attempt ended: whether the watchdog cancelled it (the mark is cleared,
        so it does not outlive the attempt)."""
        if position in self.overdue:
            self.overdue.discard(position)
            return True
        return False

    def timeout(self) -> RequestFailed:
        return RequestFailed(FailureKind.TIMEOUT, f"request timed out after {self.limit_s:g} s")
