"""The whole job's time, its tail included, from a sample's measurements.

A bench sample measures two things a projection needs: how long the answers are (the output
lengths of its rows: speculative decoding does not change them) and how fast one server
writes at each number of requests in flight (`BatchRates`, read from the per-request token
timings: the steady part gives the rate at the running-request cap, the drain at the end of
the sample gives it at every lower count).

The job is then played out on that server (`project_job`), a fluid model of the engine's
batch loop: at most `cap` requests run at once, every running request advances at
rate(b) / b tokens a second when b run, a finished request's slot goes to the next row at
once. The rows' output lengths are the sample's, repeated in a seeded order. So the waves
(rows / cap) and the tail (the time from the last row's start to the end, when fewer than
`cap` requests are left and the server runs below its best rate) come out of the same model,
and the job whose last long answers finish first is the one picked. The simulation plays at
most `SIMULATED_ROWS_MAX` rows; a longer job's middle runs at the cap's rate and is added as
such (a job that long never runs below the cap before its end).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specpilot.bench.client import RequestTiming

SECONDS_PER_HOUR = 3600.0
#: rows a projection plays out one by one; beyond it the middle is added at the cap's rate
SIMULATED_ROWS_MAX = 20_000
#: the drain's rates are pooled over neighbouring batch sizes until each pool holds this many
#: output tokens and this share of the sample's time (one batch size alone may last one short
#: gap between two answers: too noisy)
POOL_TOKENS = 256.0
POOL_SHARE = 0.01
#: the order the sample's lengths are repeated in (a projection is the same every time)
LENGTH_ORDER_SEED = 0

RateAt = Callable[[int], float]


@dataclass(frozen=True)
class BatchRates:
    """Output tokens a second one server wrote at each number of requests in flight: the
    tokens streamed while that many were in flight over the time they were, pooled over
    neighbouring numbers (the server's view: it holds whether the engine runs every request in
    flight at once or queues some)."""

    #: (requests in flight, output tokens, seconds), one per pooled batch size, largest first
    #: (a pool's batch size is its time-weighted mean)
    points: tuple[tuple[float, float, float], ...]
    #: the most requests seen in flight
    largest: int = 0

    def rate_at(self, batch: int) -> float:
        """Output tok/s at `batch` in flight: linear through the measured batch sizes (and on
        up to the largest seen, which a pool's mean lies below); beyond that, its rate (no
        gain is assumed); below the smallest, the same speed per request (a smaller batch is
        never slower per request)."""
        # a pool with no tokens at all (every request in it queued) says nothing: left out
        known = sorted((b, t / s) for b, t, s in self.points if s > 0 and t > 0)
        if not known:
            return 0.0
        if batch <= known[0][0]:
            return known[0][1] * batch / known[0][0]
        if batch >= known[-1][0] and len(known) == 1:
            return known[-1][1]
        pairs = list(itertools.pairwise(known))
        low, high = next(
            ((lo, hi) for lo, hi in pairs if lo[0] <= batch <= hi[0]),
            pairs[-1],
        )
        at = min(float(batch), max(float(self.largest), high[0]))
        return max(0.0, low[1] + (at - low[0]) * (high[1] - low[1]) / (high[0] - low[0]))

    def capped(self, cap: int) -> BatchRates:
        """The rates a server whose running requests are capped at `cap` would show (the same
        engine: a lower cap only keeps it at the smaller batch sizes)."""
        moving = [p for p in self.points if p[1] > 0]
        # none measured at or below the cap: the smallest batch measured, at its speed per request
        kept = tuple(p for p in moving if p[0] <= cap + 0.5) or tuple(moving[-1:])
        return BatchRates(kept, min(self.largest, cap))

    def to_json(self) -> list[dict[str, float]]:
        return [
            {
                "in_flight": round(b, 2),
                "output_tokens": round(t, 1),
                "seconds": round(s, 3),
                "output_tokens_per_s": round(t / s, 1) if s > 0 else 0.0,
            }
            for b, t, s in self.points
        ]


def batch_rates(requests: Sequence[RequestTiming]) -> BatchRates:
    """Per in-flight count, the tokens that arrived and the seconds spent there, pooled.

    A count that lasts less than the median gap between two chunks of one request (one engine
    step) is no batch the engine ran: it is the client's refill lag after an answer (often
    while it reads a burst of chunks), so its time and tokens count with the count before it.
    """
    changes: dict[float, int] = {}
    stamps: list[tuple[float, float]] = []  # (when, tokens)
    for r in requests:
        if r.latency_s <= 0:
            continue
        changes[r.start_s] = changes.get(r.start_s, 0) + 1
        end_s = r.start_s + r.latency_s
        changes[end_s] = changes.get(end_s, 0) - 1
        times = [r.start_s + r.ttft_s]
        for gap in r.itl_s:
            times.append(times[-1] + gap)
        stamps += [(t, r.output_tokens / len(times)) for t in times]
    edges = sorted(changes)
    if len(edges) < 2:
        return BatchRates((), 0)
    stamps.sort()
    gaps = sorted(gap for r in requests for gap in r.itl_s)
    step_s = gaps[len(gaps) // 2] if gaps else 0.0
    seconds: dict[int, float] = {}
    tokens: dict[int, float] = {}
    in_flight, cursor, level = 0, 0, 0
    for here, after in itertools.pairwise(edges):
        in_flight += changes[here]
        got = 0.0
        while cursor < len(stamps) and stamps[cursor][0] <= after:
            if stamps[cursor][0] > here or (stamps[cursor][0] == here and here == edges[0]):
                got += stamps[cursor][1]
            cursor += 1
        if in_flight <= 0:
            continue  # nothing in flight: no rate to read
        if after - here >= step_s or level == 0:
            level = in_flight
        seconds[level] = seconds.get(level, 0.0) + (after - here)
        tokens[level] = tokens.get(level, 0.0) + got
    return BatchRates(_pooled(seconds, tokens), max(seconds, default=0))


def _pooled(seconds: dict[int, float], tokens: dict[int, float]) -> tuple[tuple[float, float, float], ...]:
    """Neighbouring numbers in flight pooled from the largest down until a pool holds
    `POOL_TOKENS` and `POOL_SHARE` of the time: a streamed chunk is timed when the client reads
    it, so a pool much shorter than the client's read bursts misplaces tokens."""
    least_s = POOL_SHARE * sum(seconds.values())
    points: list[tuple[float, float, float]] = []
    weight = pool_tokens = pool_s = 0.0
    for batch in sorted(seconds, reverse=True):
        pool_s += seconds[batch]
        pool_tokens += tokens[batch]
        weight += batch * seconds[batch]
        if pool_tokens >= POOL_TOKENS and pool_s >= least_s:
            points.append((weight / pool_s, pool_tokens, pool_s))
            weight = pool_tokens = pool_s = 0.0
    if pool_s > 0:
        points.append((weight / pool_s, pool_tokens, pool_s))
    return tuple(points)


@dataclass(frozen=True)
class JobTime:
    """The whole input on `servers` servers of `gpus_per_server` GPUs, each capped at `cap`."""

    rows: int
    cap: int
    servers: int
    gpus_per_server: int
    wall_s: float
    #: from the last row's start to the end: fewer than `cap` requests left
    tail_s: float
    #: output tok/s one server sustains at `cap` in flight
    steady_tokens_per_s: float
    mean_output_tokens: float

    @property
    def waves(self) -> float:
        return self.rows / (self.cap * self.servers)

    @property
    def tail_share(self) -> float:
        return self.tail_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def gpu_hours(self) -> float:
        return self.wall_s * self.servers * self.gpus_per_server / SECONDS_PER_HOUR

    def to_json(self) -> dict[str, float | int]:
        return {
            "rows": self.rows,
            "cap": self.cap,
            "servers": self.servers,
            "gpus_per_server": self.gpus_per_server,
            "wall_s": round(self.wall_s, 1),
            "tail_s": round(self.tail_s, 1),
            "tail_share": round(self.tail_share, 4),
            "waves": round(self.waves, 2),
            "gpu_hours": round(self.gpu_hours, 3),
            "steady_tokens_per_s": round(self.steady_tokens_per_s, 1),
            "mean_output_tokens": round(self.mean_output_tokens, 1),
        }


def project_job(
    lengths: Sequence[int],
    rows: int,
    cap: int,
    rate_at: RateAt,
    *,
    servers: int = 1,
    gpus_per_server: int = 1,
) -> JobTime:
    """Play the job out: `rows` answers of the sample's `lengths` on `servers` servers whose
    output tok/s at b in flight is `rate_at(b)`, each running at most `cap` at once."""
    if not lengths or rows <= 0 or cap <= 0:
        raise ValueError("a projection needs output lengths, rows and a cap")
    per_server = math.ceil(rows / servers)  # the server with the most rows ends the job
    played = min(per_server, max(SIMULATED_ROWS_MAX, 4 * cap))
    order = list(lengths)
    random.Random(LENGTH_ORDER_SEED).shuffle(order)
    wall_s, tail_s = _play([order[i % len(order)] for i in range(played)], cap, rate_at)
    mean = sum(lengths) / len(lengths)
    steady = rate_at(cap)
    if per_server > played and steady > 0:
        wall_s += (per_server - played) * mean / steady
    return JobTime(rows, cap, servers, gpus_per_server, wall_s, tail_s, steady, mean)


def _play(lengths: Sequence[int], cap: int, rate_at: RateAt) -> tuple[float, float]:
    """(wall seconds, tail seconds) of one server running `lengths` in order, `cap` at once."""
    now_s = 0.0
    done_tokens = 0.0  # tokens every running request has received since the start
    running: list[float] = []  # each running request's finish, in `done_tokens`
    rates: dict[int, float] = {}
    queue = iter(lengths)
    last_start_s = 0.0
    left = len(lengths)
    for length in queue:
        heapq.heappush(running, done_tokens + length)
        left -= 1
        if len(running) == cap:
            break
    while running:
        batch = len(running)
        if batch not in rates:
            rates[batch] = rate_at(batch)
        per_request = rates[batch] / batch
        if per_request <= 0:
            return math.inf, math.inf
        finish = running[0]
        now_s += (finish - done_tokens) / per_request
        done_tokens = finish
        while running and running[0] <= done_tokens:
            heapq.heappop(running)
            if left:
                heapq.heappush(running, done_tokens + next(queue))
                left -= 1
                last_start_s = now_s
    return now_s, now_s - last_start_s
