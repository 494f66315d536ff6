"""A fleet member alive but stalled: requests running and no token progress.

Behind the router the dispatcher's stall watchdog sees only the router, and the other members'
tokens keep it moving, so one hung member (a hung collective, a deadlocked scheduler) would hold
its requests until the request timeout. Each member's own /metrics is read instead, with each
pass of the job's fleet healer: its engine's gauge of requests running above 0 and its counter of
generated tokens unchanged for longer than the job's stall bound (the dispatcher's: the job's
`stall_after_s`, else measured) is a stall. What a member's engine exports is the engines' data
(`generate.dispatch.servers`: `observe_tokens`, `requests_running`); a member exporting neither
is never called stalled.
"""

from __future__ import annotations

import time

import aiohttp

from specpilot.fleet.spec import Fleet, Member
from specpilot.generate.dispatch.servers import Server, observe_tokens, requests_running, scrape_metrics

#: a member's /metrics that does not answer within this is not read this pass
SCRAPE_TIMEOUT_S = 5.0


class MemberStalls:
    """Each member's token progress, from one scrape of its /metrics per look."""

    def __init__(self, fleet: Fleet) -> None:
        self.members = fleet.members
        # the dispatcher's record of a server's progress, one per member (never sent to)
        self.progress = {m.name: Server(m.worker_url) for m in fleet.members}

    def observed(
        self, member: Member, values: dict[str, float] | None, now: float, bound_s: float | None
    ) -> str | None:
        """Why `member` is stalled at `now` after a scrape (`values`; None: its /metrics did not
        answer), or None. The quiet time counts from the last scrape where its tokens moved or
        nothing ran; a counter read for the first time or lower than before (a restart) starts it."""
        server = self.progress[member.name]
        if values is None:
            server.tokens_seen = None  # the counter's continuity is lost: it may be a new process
            return None
        before = server.tokens_seen
        observe_tokens(server, values, now)
        running = requests_running(values)
        after = server.tokens_seen
        if not running or before is None or after is None or after < before:
            server.progress_at = now
            return None
        quiet_s = now - server.progress_at
        if bound_s is None or quiet_s <= bound_s:
            return None
        return (
            f"no token progress for {quiet_s:.0f} s with {running:g} requests running "
            f"(stall bound {bound_s:.0f} s)"
        )

    async def look(self, bound_s: float | None) -> list[tuple[Member, str]]:
        """Scrape every member; those stalled past `bound_s` (None: no bound yet), and why."""
        stalled: list[tuple[Member, str]] = []
        async with aiohttp.ClientSession() as session:
            for member in self.members:
                values = await scrape_metrics(session, self.progress[member.name], SCRAPE_TIMEOUT_S)
                why = self.observed(member, values, time.monotonic(), bound_s)
                if why is not None:
                    stalled.append((member, why))
        return stalled

    def restarted(self, member: Member) -> None:
        """`member` was stopped and started again: its quiet time starts at its next scrape."""
        self.progress[member.name].tokens_seen = None
