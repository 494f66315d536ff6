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
#: levels of requests in flight the rates are solved for (counts share levels beyond it)
LEVELS_MAX = 48
#: the pull of neighbouring levels' rates together, relative to the requests' evidence
SMOOTHING = 0.02
#: coordinate-descent sweeps of the least squares (converged well before, at these sizes)
SWEEPS = 200
#: the order the sample's lengths are repeated in (a projection is the same every time)
LENGTH_ORDER_SEED = 0

RateAt = Callable[[int], float]


@dataclass(frozen=True)
class BatchRates:
    """How fast one request advanced with b requests in flight, from whole requests.

    Each answered request says how many tokens it wrote over the time it held a slot (its
    queue and prefill included) and how long of that time each number of requests was in
    flight: the per-request rate at each number is what explains every request at once
    (`batch_rates`). Whole requests, not token chunks, because a streamed chunk arrives when
    the client reads it, in bursts, not when the engine wrote it. The server's output tok/s
    at b in flight is b times the per-request rate there.
    """

    #: (mean in flight, output tokens, request-seconds) per level, largest in flight first
    points: tuple[tuple[float, float, float], ...]
    #: the most requests seen in flight
    largest: int = 0

    def rate_at(self, batch: int) -> float:
        """Output tok/s at `batch` in flight: the per-request rate linear between the levels;
        below the smallest level, its per-request rate (a smaller batch is never slower per
        request); above the largest, linear on up to the most seen in flight, then that (no
        gain is assumed beyond what was run)."""
        # a level solved to no progress at all says nothing of its neighbours: left out
        known = sorted(
            (b, tokens / seconds) for b, tokens, seconds in self.points if seconds > 0 and tokens > 0
        )
        if not known:
            return 0.0
        if batch <= known[0][0] or len(known) == 1:
            return batch * known[0][1] if batch <= known[0][0] else min(batch, self.largest) * known[0][1]
        pairs = list(itertools.pairwise(known))
        low, high = next(((lo, hi) for lo, hi in pairs if lo[0] <= batch <= hi[0]), pairs[-1])
        at = min(float(batch), max(float(self.largest), high[0]))
        per_request = low[1] + (at - low[0]) * (high[1] - low[1]) / (high[0] - low[0])
        return max(0.0, at * per_request)

    def capped(self, cap: int) -> BatchRates:
        """The rates a server whose running requests are capped at `cap` would show (the same
        engine: a lower cap only keeps it at the smaller batch sizes)."""
        kept = tuple(p for p in self.points if p[0] <= cap + 0.5) or self.points[-1:]
        return BatchRates(kept, min(self.largest, cap))

    def to_json(self) -> list[dict[str, float]]:
        return [
            {
                "in_flight": round(b, 2),
                "output_tokens": round(t, 1),
                "request_seconds": round(s, 3),
                "output_tokens_per_s": round(b * t / s, 1) if s > 0 else 0.0,
            }
            for b, t, s in self.points
        ]


def batch_rates(requests: Sequence[RequestTiming]) -> BatchRates:
    """The per-request rate at each number in flight that best explains every request's
    output tokens over the time it spent at each number (`BatchRates`)."""
    answered = [r for r in requests if r.latency_s > 0]
    changes: dict[float, int] = {}
    for r in answered:
        changes[r.start_s] = changes.get(r.start_s, 0) + 1
        changes[r.start_s + r.latency_s] = changes.get(r.start_s + r.latency_s, 0) - 1
    edges = sorted(changes)
    if len(edges) < 2:
        return BatchRates((), 0)
    counts: list[int] = []  # requests in flight from edges[i] to edges[i + 1]
    in_flight = 0
    for here in edges[:-1]:
        in_flight += changes[here]
        counts.append(in_flight)
    largest = max(counts)
    position = {edge: index for index, edge in enumerate(edges)}
    level_of = {n: _level(n, largest) for n in set(counts) if n > 0}
    rows: list[tuple[dict[int, float], float, float]] = []  # (seconds per level, tokens, latency)
    for r in answered:
        spent: dict[int, float] = {}
        for index in range(position[r.start_s], position[r.start_s + r.latency_s]):
            level = level_of[counts[index]]
            spent[level] = spent.get(level, 0.0) + edges[index + 1] - edges[index]
        rows.append((spent, float(r.output_tokens), r.latency_s))
    return BatchRates(_solved(rows, counts, edges, level_of), largest)


def _level(count: int, largest: int) -> int:
    """Counts in flight share a level when there are more than `LEVELS_MAX` of them."""
    return count if largest <= LEVELS_MAX else math.ceil(count * LEVELS_MAX / largest)


def _solved(
    rows: list[tuple[dict[int, float], float, float]],
    counts: list[int],
    edges: list[float],
    level_of: dict[int, int],
) -> tuple[tuple[float, float, float], ...]:
    """Least squares by coordinate descent: each request's rate (tokens over latency) against
    the per-request rates at the levels it lived through, weighted by its time there, with a
    light pull of neighbouring levels together; rates never below zero."""
    levels = sorted({level for spent, _, _ in rows for level in spent})
    weight = {level: 0.0 for level in levels}  # request-seconds at each level
    mean_count = {level: 0.0 for level in levels}
    for index, count in enumerate(counts):
        if count > 0:
            span = edges[index + 1] - edges[index]
            weight[level_of[count]] += count * span
            mean_count[level_of[count]] += count * count * span
    # a[i][level]: the share of request i's life at that level; y[i]: its rate
    a = [{level: t / latency for level, t in spent.items()} for spent, _, latency in rows]
    y = [tokens / latency for _, tokens, latency in rows]
    start = sum(y) / len(y)
    v = {level: start for level in levels}
    residual = [y[i] - sum(share * v[level] for level, share in a[i].items()) for i in range(len(rows))]
    touching: dict[int, list[int]] = {level: [] for level in levels}
    for i, shares in enumerate(a):
        for level in shares:
            touching[level].append(i)
    smooth = SMOOTHING * len(rows) / len(levels)
    for _ in range(SWEEPS):
        for k, level in enumerate(levels):
            neighbours = [v[levels[j]] for j in (k - 1, k + 1) if 0 <= j < len(levels)]
            num = smooth * sum(neighbours)
            den = smooth * len(neighbours)
            for i in touching[level]:
                share = a[i][level]
                num += share * (residual[i] + share * v[level])
                den += share * share
            new = max(0.0, num / den) if den > 0 else v[level]
            if new != v[level]:
                for i in touching[level]:
                    residual[i] -= a[i][level] * (new - v[level])
                v[level] = new
    return tuple(
        (mean_count[level] / weight[level], v[level] * weight[level], weight[level])
        for level in reversed(levels)
        if weight[level] > 0
    )


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
