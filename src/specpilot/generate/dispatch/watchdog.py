"""The request timeout and the stall bound, looked at together once a second.

The request timeout: a request older than --request-timeout-s is cancelled, and its row
fails that attempt as a timeout. The session has no per-request timer (see
client.open_session: one costs 5-10% of the CPU a request takes); this watchdog measures each
request from when it was sent, so a server that drip-feeds an answer (a byte now and then,
never the end) cannot hold a row forever.

A stall: an engine that stays alive while its requests block (a hung collective, a deadlocked
scheduler) answers /health and holds every request until the request timeout, 30 minutes
each. A server makes progress when one of its requests is answered or its /metrics token
counter moves (`Server.progress_at`); one with requests in flight and no progress for the
stall bound (--stall-after-s, else STALL_FACTOR x the p99 request time seen so far, at least
STALL_FLOOR_S) is stalled: its rows go back to the queue without spending attempts, and
`health.ServerHealth.stalled` decides what becomes of it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from specpilot.generate.dispatch.client import FailureKind, RequestFailed
from specpilot.generate.dispatch.policy import GENERATE_SETTING_NAMES
from specpilot.generate.dispatch.servers import Server

#: how often the watchdog looks: a request may outlive the timeout by up to this
LOOK_EVERY_S = 1.0
#: no stall is called sooner than this without --stall-after-s (a long prefill, a slow first step)
STALL_FLOOR_S = 120.0
#: a stall: no progress for this many times the p99 request time seen so far
STALL_FACTOR = 4.0
#: request times the p99 is taken over (the latest)
STALL_SAMPLES = 1000
#: what a p99 is
P99 = 0.99


class StallWatch:
    """The stall bound from the request times seen, and which server is past it."""

    def __init__(
        self, stall_after_s: float | None, setting: str = GENERATE_SETTING_NAMES.stall_after_s
    ) -> None:
        """`stall_after_s`: the bound as given (`setting`: where, named when it ends a server);
        None: measured."""
        self.stall_after_s, self.setting = stall_after_s, setting
        self.request_s: deque[float] = deque(maxlen=STALL_SAMPLES)

    def took(self, request_s: float) -> None:
        """A request was answered after `request_s`."""
        self.request_s.append(request_s)

    def bound_s(self) -> float | None:
        """No progress for this long is a stall; None: nothing measured yet, no bound (the
        request timeout alone: a first request may take any time)."""
        if self.stall_after_s is not None:
            return self.stall_after_s
        if not self.request_s:
            return None
        ordered = sorted(self.request_s)
        return max(STALL_FLOOR_S, STALL_FACTOR * ordered[min(len(ordered) - 1, int(P99 * len(ordered)))])

    def stalled(self, now: float, server: Server, sent_at: dict[int, float]) -> str | None:
        """Why `server` is stalled at `now`, or None. A router is not watched: its workers are."""
        if server.router or not server.healthy or not server.in_flight:
            return None
        quiet_since = max(server.progress_at, min(sent_at.get(p, now) for p in server.in_flight))
        quiet_s = now - quiet_since
        if quiet_s <= (self.stall_after_s or STALL_FLOOR_S):
            return None  # the bound is computed only for a server quiet this long
        bound_s = self.bound_s()
        if bound_s is None or quiet_s <= bound_s:
            return None
        how = (
            self.setting
            if self.stall_after_s is not None
            else f"{STALL_FACTOR:g} x the p99 request time so far, at least {STALL_FLOOR_S:g} s"
        )
        return (
            f"no token progress for {round(quiet_s, 1):g} s with {len(server.in_flight)} requests in flight "
            f"(stall bound {round(bound_s, 1):g} s: {how})"
        )


class RequestWatchdog:
    """Cancels overdue requests and remembers which cancels were its own."""

    def __init__(
        self,
        limit_s: float,
        sent_at: dict[int, float],
        stall_after_s: float | None = None,
        stall_setting: str = GENERATE_SETTING_NAMES.stall_after_s,
    ) -> None:
        """`sent_at`: position -> monotonic time its current request went out; `stall_after_s`:
        --stall-after-s, or the job's key `stall_setting` names (None: the bound is measured)."""
        self.limit_s, self.sent_at = limit_s, sent_at
        self.overdue: set[int] = set()  # cancelled by the timeout, not yet seen by their attempt
        self.stall = StallWatch(stall_after_s, stall_setting)
        self._looked_at: float | None = None

    def look(self, now: float, servers: Iterable[Server]) -> list[tuple[Server, str]]:
        """Cancel the requests older than the limit; at most once per LOOK_EVERY_S. Returns
        the servers stalled, and why."""
        if self._looked_at is None:
            self._looked_at = now
        if now - self._looked_at < LOOK_EVERY_S:
            return []
        self._looked_at = now
        stalled: list[tuple[Server, str]] = []
        for server in servers:
            why = self.stall.stalled(now, server, self.sent_at)
            if why is not None:
                stalled.append((server, why))
                continue  # its requests are taken back whole, none is a timeout
            for position, task in server.in_flight.items():
                if now - self.sent_at.get(position, now) > self.limit_s and position not in self.overdue:
                    self.overdue.add(position)
                    task.cancel()
        return stalled

    def settle(self, position: int) -> bool:
        """The row's attempt ended: whether the watchdog cancelled it (the mark is cleared,
        so it does not outlive the attempt)."""
        if position in self.overdue:
            self.overdue.discard(position)
            return True
        return False

    def timeout(self) -> RequestFailed:
        return RequestFailed(FailureKind.TIMEOUT, f"request timed out after {self.limit_s:g} s")
