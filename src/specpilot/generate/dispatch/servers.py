"""The set of servers a job sends to: placement, take-out, probing, spec metrics.

Placement: a new request goes to the healthy server with the fewest requests in flight,
never above `--concurrency` per server, and not to one that said "slow down" (429/503) for as
long as its Retry-After asked. A server whose connections fail is taken out:
its in-flight requests are cancelled and their rows requeued without spending an attempt
(the row did nothing wrong); a prober then polls `/v1/models` (or `/health`) with backoff
and puts the server back once it answers. With every server out, nothing is dispatched,
so no retries are burnt while the job waits. A server taken out again each time it rejoins,
without finishing a request in between, is out for good after IDLE_REJOINS_LIMIT times.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field

import aiohttp

from specpilot.engines import registry
from specpilot.engines.metrics import SpecMetric
from specpilot.secrets import url_without_credentials

#: /health first: a 5xx there means unhealthy although /v1/models (served by the API
#: process alone) may still answer; a server without /health (404) is asked /v1/models
PROBE_PATHS = ("/health", "/v1/models")
HEALTH_PATH = "/health"
#: failures in a row (resets, timeouts, 5xx) that take a server out although it still
#: accepts connections; back in after a good probe, one more failure takes it out again
FAILURES_BEFORE_TAKE_OUT = 5
#: times in a row a server may be taken out again after rejoining without finishing a single
#: request: past it, it is out for good (it answers probes but serves nothing: a drip-feeding
#: or wedged server would otherwise pause and rejoin forever)
IDLE_REJOINS_LIMIT = 3
#: an smg router answers /health while it has no worker; /readiness is 503 then
ROUTER_PROBE_PATHS = ("/readiness",)


@dataclass
class Server:
    base_url: str
    in_flight: dict[int, asyncio.Task[None]] = field(default_factory=dict)  # position -> task
    healthy: bool = True
    done_rows: int = 0
    taken_out_count: int = 0
    router: bool = False
    slots: int = 1  # workers behind a router: it takes slots x --concurrency at once
    failure_streak: int = 0  # server-side failures since its last answer
    probe_delay_s: float = 0.5  # the prober's first wait; doubles each time it is taken out again
    group: str | None = None  # router replicas of one fleet: one room, shared
    #: done_rows when it last rejoined (None: never taken out and brought back)
    rejoined_at_done: int | None = None
    idle_rejoins: int = 0  # take-outs in a row that followed a rejoin with nothing finished
    #: monotonic time of its last progress: a request answered, its token counter moving
    progress_at: float = 0.0
    #: its /metrics count of generated tokens when last scraped (None: not exported)
    tokens_seen: float | None = None
    #: stalled, and no healer restarts it: out, with why (never probed back)
    stalled: str | None = None
    #: taken out while a healer restarts it: probed back once the healer says it is up
    restarting: bool = False
    #: monotonic time until which it asked to be sent nothing ("slow down" and its Retry-After)
    slow_until: float = 0.0

    @property
    def out_for_good(self) -> bool:
        return self.idle_rejoins >= IDLE_REJOINS_LIMIT

    @property
    def name(self) -> str:
        """host:port[/prefix]: what rows, the ledger and every output name it by (never its password)."""
        return url_without_credentials(self.base_url).split("://", 1)[-1]


class ServerPool:
    """Healthy servers and their in-flight work."""

    def __init__(
        self,
        base_urls: list[str],
        concurrency: int,
        routers: dict[str, int] | None = None,
        groups: dict[str, str] | None = None,
    ) -> None:
        """`routers`: base URL -> workers behind it, for the URLs that are routers;
        `groups`: base URL -> group, for router replicas in front of the same workers."""
        routers, groups = routers or {}, groups or {}
        self.servers = [
            Server(url, router=url in routers, slots=routers.get(url, 1), group=groups.get(url))
            for url in base_urls
        ]
        self.concurrency = concurrency
        self.grouped = bool(groups)

    def pick(self) -> Server | None:
        """The healthy server with the most free room (a router counts per worker; replicas
        of one group share one room, and the one with fewer in flight gets the request)."""
        used = self._in_flight_by_group() if self.grouped else {}
        now = time.monotonic()
        best: Server | None = None
        best_room = (0, 0)  # (free room, -in flight): the first server above it wins a tie
        for server in self.servers:
            own = len(server.in_flight)
            free = self.concurrency * server.slots - (used[server.group] if server.group else own)
            if server.healthy and server.slow_until <= now and (free, -own) > best_room:
                best, best_room = server, (free, -own)
        return best

    def served_elsewhere(self, server: Server, now: float) -> bool:
        """Whether another server takes requests now (healthy, not asking to slow down)."""
        return any(s is not server and s.healthy and s.slow_until <= now for s in self.servers)

    def _in_flight_by_group(self) -> dict[str, int]:
        """The requests in flight to each group's replicas together."""
        used: dict[str, int] = {}
        for server in self.servers:
            if server.group is not None:
                used[server.group] = used.get(server.group, 0) + len(server.in_flight)
        return used

    def all_down(self) -> bool:
        return not any(server.healthy for server in self.servers)

    def all_out_for_good(self) -> bool:
        return all(server.out_for_good for server in self.servers)

    def total_in_flight(self) -> int:
        return sum(len(server.in_flight) for server in self.servers)

    def record_success(self, server: Server) -> None:
        server.done_rows += 1
        server.failure_streak = 0
        server.probe_delay_s = 0.5

    def record_failure(self, server: Server, server_fault: bool) -> bool:
        """Count a failed request; True when the server's failures say take it out."""
        server.failure_streak = server.failure_streak + 1 if server_fault else 0
        return server.healthy and server.failure_streak >= FAILURES_BEFORE_TAKE_OUT

    def take_out(self, server: Server, *, overloaded: bool = False) -> list[int]:
        """Cancel the server's in-flight requests; returns their positions to requeue.
        `overloaded` (it said 503 "slow down"): not counted towards out for good."""
        server.healthy = False
        server.taken_out_count += 1
        idle = server.rejoined_at_done is not None and server.done_rows == server.rejoined_at_done
        if overloaded:
            return self._cancel_all(server)
        server.idle_rejoins = server.idle_rejoins + 1 if idle else 0
        return self._cancel_all(server)

    def _cancel_all(self, server: Server) -> list[int]:
        positions = list(server.in_flight)
        for task in server.in_flight.values():
            task.cancel()
        server.in_flight.clear()
        return positions

    def hold(self, server: Server) -> list[int]:
        """Out, for a stall: its in-flight requests cancelled (their positions returned), not
        counted towards out for good (a restart, not a failing server, decides what follows)."""
        server.healthy = False
        server.taken_out_count += 1
        return self._cancel_all(server)

    def bring_back(self, server: Server) -> None:
        """On probation: the streak stays one short of taking it out again."""
        server.healthy = True
        server.rejoined_at_done = server.done_rows
        server.failure_streak = min(server.failure_streak, FAILURES_BEFORE_TAKE_OUT - 1)


async def probe(session: aiohttp.ClientSession, server: Server, timeout_s: float) -> bool:
    """True if the server answers a health or models request with 200 (and /health with no 5xx)."""
    for path in ROUTER_PROBE_PATHS if server.router else PROBE_PATHS:
        try:
            async with session.get(
                f"{server.base_url}{path}", timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response:
                if response.status == 200:
                    return True
                if path == HEALTH_PATH and response.status >= 500:
                    return False
        except (aiohttp.ClientError, TimeoutError):
            continue
    return False


def generated_tokens_metrics() -> tuple[str, ...]:
    """Every registered engine's counter of generated tokens: a server's token progress."""
    return tuple(e.generated_tokens_metric for e in registry.ENGINES if e.generated_tokens_metric)


def observe_tokens(server: Server, values: dict[str, float], now: float) -> None:
    """A scrape of `server`'s /metrics: its token counter moving is progress."""
    found = [values[name] for name in generated_tokens_metrics() if name in values]
    if not found:
        return
    total = sum(found)
    if server.tokens_seen is not None and total > server.tokens_seen:
        server.progress_at = now
    server.tokens_seen = total


def requests_running(values: dict[str, float]) -> float | None:
    """A scrape's count of requests running (every registered engine's gauge); None: none exported."""
    names = [e.running_requests_metric for e in registry.ENGINES if e.running_requests_metric]
    found = [values[name] for name in names if name in values]
    return sum(found) if found else None


def spec_metrics() -> tuple[SpecMetric, ...]:
    """Every registered engine's speculative-decoding series: a server's /metrics says no engine."""
    return tuple(metric for engine in registry.ENGINES for metric in engine.spec_metrics)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each series over its label sets (one value per metric name)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match:
            try:
                totals[match.group(1)] = totals.get(match.group(1), 0.0) + float(match.group(2))
            except ValueError:
                continue
    return totals


@dataclass
class SpecTracker:
    """Mean acceptance length over the job, from counter deltas since the first scrape."""

    baseline: dict[str, tuple[float, float]] = field(default_factory=dict)
    latest: dict[str, tuple[float, float]] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)

    def observe(self, server: str, values: dict[str, float]) -> None:
        for metric in spec_metrics():
            if metric.accepted and metric.drafts and metric.drafts in values:
                pair = (values.get(metric.accepted, 0.0), values[metric.drafts])
                self.baseline.setdefault(server, pair)
                self.latest[server] = pair
            if metric.gauge and metric.gauge in values:
                self.gauges[server] = values[metric.gauge]

    def mean_accept_length(self) -> float | None:
        accepted = drafts = 0.0
        for server, (acc, dr) in self.latest.items():
            base_acc, base_dr = self.baseline[server]
            accepted, drafts = accepted + acc - base_acc, drafts + dr - base_dr
        if drafts > 0:
            return 1.0 + accepted / drafts
        positive = [v for v in self.gauges.values() if v > 0]
        return sum(positive) / len(positive) if positive else None


async def scrape_metrics(
    session: aiohttp.ClientSession, server: Server, timeout_s: float
) -> dict[str, float] | None:
    try:
        async with session.get(
            f"{server.base_url}/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            if response.status != 200:
                return None
            return parse_metrics(await response.text())
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


async def router_workers_ready(
    session: aiohttp.ClientSession, server: Server, timeout_s: float
) -> int | None:
    """How many workers an smg router lists as ready and healthy (GET /workers), or None."""
    try:
        async with session.get(
            f"{server.base_url}/workers", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            if response.status != 200:
                return None
            workers = (await response.json(content_type=None)).get("workers") or []
            return sum(1 for w in workers if w.get("status") == "ready" and w.get("is_healthy"))
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError, TypeError):
        return None
