"""The servers' side of failures: whether a failure was the row's or its server's, taking a
failing server out and probing it back, and pausing (no retries spent) while every server is
down, up to --give-up-after-s; a job whose every request is answered "slow down" (429/503)
ends after --give-up-after-s as well, naming what the servers answered.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import aiohttp

from specpilot.generate.dispatch.client import RETRY_AFTER_DEFAULT_S, FailureKind, RequestFailed
from specpilot.generate.dispatch.policy import GENERATE_SETTING_NAMES, DispatchPolicy, SettingNames
from specpilot.generate.dispatch.retries import OVERLOAD_STATUSES, RowRetries
from specpilot.generate.dispatch.servers import Server, ServerPool
from specpilot.generate.dispatch.state import Probes
from specpilot.generate.dispatch.stats import LiveStats

#: --give-up-after-s is for outages of servers that worked; one that never answered gives up sooner
NEVER_ANSWERED_GIVE_UP_S = 60.0
#: a taken-out router is probed this often, not with backoff: the job rejoins within this
#: of the router answering again (fleet-repair restarts it in seconds)
ROUTER_PROBE_INTERVAL_S = 0.25

#: asks a server whether it answers: (session, server, timeout_s) -> alive
Probe = Callable[[aiohttp.ClientSession, Server, float], Awaitable[bool]]
#: starts a task in the job's group under a name; None when the job is ending
Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None] | None"]


def give_up_reason(
    down_for_s: float,
    give_up_after_s: float,
    never_answered: bool,
    never_answered_limit_s: float = NEVER_ANSWERED_GIVE_UP_S,
    setting: str = GENERATE_SETTING_NAMES.give_up_after_s,
) -> str | None:
    """Why the job stops after every server has been down `down_for_s`; None: keep probing.
    A server that never answered is most likely a wrong address, not an outage: sooner.
    `setting`: where `give_up_after_s` is given (generate's flag, or the job's key)."""
    limit_s = min(give_up_after_s, never_answered_limit_s) if never_answered else give_up_after_s
    if down_for_s <= limit_s:
        return None
    if never_answered:
        return (
            f"no server has answered since the job started ({limit_s:g} s); check the "
            "--server / --run addresses and that the servers are up"
        )
    return (
        f"every server was down for {limit_s:g} s ({setting}); gave up: run the "
        "same command again once a server is up (the rows left are kept)"
    )


@dataclass
class AllDownPause:
    """Since when every server has been down, and whether it has been too long."""

    give_up_after_s: float
    never_answered_limit_s: float = NEVER_ANSWERED_GIVE_UP_S
    setting: str = GENERATE_SETTING_NAMES.give_up_after_s
    down_since: float | None = None
    #: seconds every server was down in pauses that ended (the job's stalls)
    ended_s: float = 0.0

    def paused(self, now: float, never_answered: bool) -> str | None:
        """Every server is down at `now`: why the job gives up, or None to keep waiting."""
        if self.down_since is None:
            self.down_since = now
        down_for_s = now - self.down_since
        return give_up_reason(
            down_for_s, self.give_up_after_s, never_answered, self.never_answered_limit_s, self.setting
        )

    def resumed(self, now: float) -> None:
        if self.down_since is not None:
            self.ended_s += now - self.down_since
        self.down_since = None

    def stalled_s(self, now: float) -> float:
        """Seconds every server was down so far (the pause going on included)."""
        return self.ended_s + (now - self.down_since if self.down_since is not None else 0.0)

    @property
    def pausing(self) -> bool:
        return self.down_since is not None


@dataclass
class OverloadWatch:
    """Since when every request has been answered 429/503 ("slow down"): no row is served while
    each row backs off for free, so past --give-up-after-s the job ends, naming the answers."""

    give_up_after_s: float
    names: SettingNames = GENERATE_SETTING_NAMES
    since: float | None = None
    statuses: Counter[int] = field(default_factory=Counter)

    def overloaded(self, now: float, status: int) -> None:
        if self.since is None:
            self.since = now
        self.statuses[status] += 1

    def served(self) -> None:
        """A request was answered otherwise (an answer, another status): not every one says slow down."""
        if self.since is not None:
            self.since = None
            self.statuses.clear()

    def give_up_reason(self, now: float) -> str | None:
        if self.since is None or now - self.since <= self.give_up_after_s:
            return None
        answered = " or ".join(f"{status} {HTTPStatus(status).phrase}" for status in sorted(self.statuses))
        return (
            f"every request answered {answered} for {self.give_up_after_s:g} s "
            f"({self.names.give_up_after_s}): "
            "the server is overloaded or limits this client's rate; run the same command again later "
            f"or with a lower {self.names.concurrency} (the rows left are kept)"
        )


class ServerHealth:
    """Decides row-or-server for each failure; takes servers out and probes them back."""

    def __init__(
        self,
        pool: ServerPool,
        rows: RowRetries,
        probe: Probe,
        session: aiohttp.ClientSession,
        policy: DispatchPolicy,
        pause: AllDownPause,
        stats: LiveStats,
        spawn: Spawn,
        say: Callable[[str], None],
    ) -> None:
        """`probe`: asks one server whether it answers; `spawn`: starts the probes in the job's
        task group; `say`: tells the user of a server going and coming back."""
        self.pool, self.rows, self._probe, self._session = pool, rows, probe, session
        self.probe_timeout_s, self.probe_cap_s = policy.probe_timeout_s, policy.probe_cap_s
        self.pause, self.stats, self._spawn, self._say = pause, stats, spawn, say
        self.probes = Probes()
        self.overload = OverloadWatch(policy.give_up_after_s, policy.names)
        #: a healer that restarts a stalled server: told its base URL and why (None: generate
        #: alone, and a stalled server is out)
        self.on_stall: Callable[[str, str], None] | None = None
        #: a server answered a request with an HTTP status (a 429 is an answer: not a wrong address)
        self.heard = False
        #: why each server left for good; once every server has, `no_server_left` says why
        self.out_for_good: list[str] = []
        self.no_server_left: str | None = None

    def why_stop(self, now: float) -> str | None:
        """Looked at every tick: why the job must stop for want of servers, or None. While
        every server is down the job pauses (sends nothing, spends no retries) and probes."""
        why = self.overload.give_up_reason(now)
        if why is None:
            why = self._no_server_left()
        if why is not None:
            return why
        if not self.pool.all_down():
            self.pause.resumed(now)
            self.stats.paused_reason = None
            return None
        return self._every_server_down(now)

    def _no_server_left(self) -> str | None:
        """Why no server can serve the rest (every one stalled or out for good), or None."""
        stalled = [s for s in self.pool.servers if s.stalled is not None]
        if stalled and all(s.stalled is not None or s.out_for_good for s in self.pool.servers):
            why = "; ".join(f"server {s.name} stalled: {s.stalled}" for s in stalled)
            return (
                f"{why}; no server is left to send to: restart it (`specpilot down` and `up`, or the "
                "server's own way), then run the same command again (the rows left are kept)"
            )
        if self.pool.all_out_for_good():
            # nothing can serve the rest: the job ends, and its rows fail with this reason
            self.no_server_left = "; ".join(self.out_for_good)
            return f"no server is left to send to: {self.no_server_left}"
        return None

    def _every_server_down(self, now: float) -> str | None:
        """While every server is down: paused (a healer's restart, or probing); why the pause
        ends the job once it lasts too long, else None."""
        restarting = [s.name for s in self.pool.servers if s.restarting]
        if restarting:  # the healer bounds its restart (it stops the job when it fails)
            self.stats.paused_reason = f"restarting {', '.join(restarting)}; no retries spent"
            return None
        if not self.pause.pausing:
            self._say("every server is down: paused (no retries spent) while probing")
        self.stats.paused_reason = "every server is down; probing, no retries spent"
        never_answered = self.stats.done == 0 and self.stats.failed == 0 and not self.heard
        return self.pause.paused(now, never_answered=never_answered)

    def served(self) -> None:
        """A request was answered (a row's turn)."""
        self.overload.served()

    def failed(self, server: Server, position: int, failure: RequestFailed) -> None:
        """A request to `server` failed (it is no longer in flight there)."""
        now = time.monotonic()
        elsewhere = False
        if failure.status is not None:
            self.heard = True
            server.progress_at = now  # it answers: not stalled
            if failure.status in OVERLOAD_STATUSES:
                self.overload.overloaded(now, failure.status)
                # "slow down" is the server's word: it is sent nothing for its Retry-After, and
                # the row goes to a server that takes requests now (once, the row waited out the
                # Retry-After and was sent back to the same server, while another sat idle)
                wait_s = RETRY_AFTER_DEFAULT_S if failure.retry_after_s is None else failure.retry_after_s
                server.slow_until = max(server.slow_until, now + wait_s)
                elsewhere = self.pool.served_elsewhere(server, now)
            else:
                self.overload.served()
        if self.pool.record_failure(server, failure.server_fault):
            # resets, timeouts or 5xx in a row although it accepts connections: the server
            # is failing; the rows in flight there go back for free, and so does this one if
            # the server did not answer at all, but an answer (a 5xx, a body that never
            # ended) was this row's attempt: else a row that fails every server never ends
            self.take_out(
                server,
                f"{server.failure_streak} failures in a row, the last: {failure}",
                overloaded=failure.status in OVERLOAD_STATUSES,
            )
            if failure.kind is FailureKind.CONNECTION:
                self.rows.requeue(position)
            else:
                self.rows.retry_or_fail(position, failure)
            return
        if failure.kind in (FailureKind.CONNECTION, FailureKind.TIMEOUT):
            # Is it the row or the server? A probe decides: a dead server's rows go
            # back to the queue for free; on a live server it was this row's attempt.
            self.probes.parked.setdefault(server.name, []).append((position, failure))
            self._probe_soon(server)
            return
        self.rows.retry_or_fail(position, failure, elsewhere=elsewhere)

    def stalled(self, server: Server, why: str) -> None:
        """`server` has requests in flight and no progress past the stall bound: its rows go back
        to the queue without spending attempts; a healer restarts it, else it is out."""
        for position in self.pool.hold(server):
            self.rows.requeue(position)
        if self.on_stall is not None:
            server.restarting = True
            self._say(f"server {server.name} stalled: {why}; restarting it, its rows go back to the queue")
            self.on_stall(server.base_url, why)
            return
        server.stalled = why
        self._say(
            f"server {server.name} stalled: {why}; taken out (a hung engine does not recover by "
            "itself), its rows go back to the queue unspent"
        )

    def restart_on_stall(self, restart: Callable[[str, str], None] | None) -> None:
        self.on_stall = restart
        if restart is None:
            for server in self.pool.servers:
                if server.restarting:
                    server.restarting, server.stalled = False, "its restart did not happen (the healer ended)"

    def restarted(self, base_url: str) -> None:
        """The healer restarted a stalled server: probed back into rotation as it answers."""
        for server in self.pool.servers:
            if server.base_url == base_url and server.restarting:
                server.restarting = False
                self._probe_until_back(server)

    def take_out(self, server: Server, reason: str, *, overloaded: bool = False) -> None:
        for position in self.pool.take_out(server, overloaded=overloaded):
            self.rows.requeue(position)
        if server.out_for_good:
            why = (
                f"server {server.name} is out for good: taken out {server.idle_rejoins + 1} times in a row, "
                f"each time after rejoining without finishing a request (the last: {reason})"
            )
            self.out_for_good.append(why)
            self._say(why)
            return
        self._say(f"server {server.name} taken out ({reason}); its rows go back to the queue")
        self._probe_until_back(server)

    def _probe_soon(self, server: Server) -> None:
        probes = self.probes
        if server.name in probes.probing:
            return

        async def check() -> None:
            try:
                alive = await self._probe(self._session, server, self.probe_timeout_s)
            finally:
                probes.probing.discard(server.name)
            self._probed(server, alive, probes.parked.pop(server.name, []))

        if self._spawn(check(), f"the probe of server {server.name}") is not None:
            probes.probing.add(server.name)

    def _probed(self, server: Server, alive: bool, parked: list[tuple[int, RequestFailed]]) -> None:
        """The rows parked on a probe: their attempt if the server lives, free if it is down."""
        if alive or not server.healthy:
            for position, failure in parked:
                if alive:
                    self.rows.retry_or_fail(position, failure)
                else:
                    self.rows.requeue(position)
            return
        reason = str(parked[-1][1]) if parked else "health probe failed"
        for position, _ in parked:
            self.rows.requeue(position)
        self.take_out(server, reason)

    def _probe_until_back(self, server: Server) -> None:
        # taken out again soon after coming back (it answers probes, fails requests): wait longer
        delay_s, server.probe_delay_s = (
            server.probe_delay_s,
            min(server.probe_delay_s * 2, self.probe_cap_s),
        )

        async def loop() -> None:
            nonlocal delay_s
            if server.router:  # a router is one cheap process: rejoin as soon as it answers
                delay_s = ROUTER_PROBE_INTERVAL_S
            await asyncio.sleep(delay_s)
            while not await self._probe(self._session, server, self.probe_timeout_s):
                await asyncio.sleep(delay_s)
                if not server.router:
                    delay_s = min(delay_s * 2, self.probe_cap_s)
            self.pool.bring_back(server)
            self._say(f"server {server.name} answers again; back in rotation")

        self._spawn(loop(), f"the prober of taken-out server {server.name}")
