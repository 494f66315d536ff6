"""The job's speculative-decoding acceptance length: from the servers' /metrics (counter deltas
over the job) where they expose it, else from the answers' own field; polled with each router's
list of ready workers, which sets how many requests it takes at once; each scrape's token
counter is the server's token progress (the stall watchdog's)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from specpilot.generate.dispatch.servers import (
    ServerPool,
    SpecTracker,
    observe_tokens,
    router_workers_ready,
    scrape_metrics,
)
from specpilot.generate.dispatch.stats import LiveStats
from specpilot.generate.ledger.store import Ledger


class AcceptanceWatch:
    """Polls the servers' metrics; the mean acceptance length goes to the ledger's meta."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        pool: ServerPool,
        stats: LiveStats,
        ledger: Ledger,
        timeout_s: float,
    ) -> None:
        self.session, self.pool, self.stats, self.ledger, self.timeout_s = (
            session,
            pool,
            stats,
            ledger,
            timeout_s,
        )
        self.spec = SpecTracker()

    def accept_length(self) -> float | None:
        from_metrics = self.spec.mean_accept_length()
        if from_metrics is not None:
            return from_metrics
        if self.stats.accept_length_rows:
            return self.stats.accept_length_sum / self.stats.accept_length_rows
        return None

    async def loop(self, interval_s: float) -> None:
        while True:
            await self.scrape()
            await asyncio.sleep(interval_s)

    async def scrape(self) -> None:
        for server in self.pool.servers:
            if server.router:
                # members come and go (fleet-repair): the room follows the router's list
                ready = await router_workers_ready(self.session, server, self.timeout_s)
                if ready:
                    server.slots = ready
            if server.healthy:
                values = await scrape_metrics(self.session, server, self.timeout_s)
                if values is not None:
                    self.spec.observe(server.name, values)
                    observe_tokens(server, values, time.monotonic())
        accept = self.accept_length()
        if accept is not None:
            self.ledger.set_meta({"spec_accept_length": f"{accept:.4f}"})
