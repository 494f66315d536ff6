"""The whole job's time before and while it runs: GPU-hours and wall time on N GPUs, the
waves and the tail included.

A projection is arithmetic on measured rates, never a guess. Every one (bench's table, `plan
--job`, `generate`'s `projected:` line, `report`, the job's cost at start) plays the job out
with the one model here (`project_job`), a fluid model of the engine's batch loop: at most
`cap` requests run at once, every running request advances at rate(b) / b tokens a second
when b run, a finished request's slot goes to the next row at once. The rows' output lengths
are a bench sample's, repeated in a seeded order. So the waves (rows / cap) and the tail (the
time from the last row's start to the end, when fewer than `cap` requests are left and the
server runs below its best rate) come out of the same model, and the job whose last long
answers finish first is the one picked. The simulation plays at most `SIMULATED_ROWS_MAX`
rows; a longer job's middle runs at the cap's rate and is added as such (a job that long never
runs below the cap before its end).

What it rests on (`Rates`): a bench point's rates per batch size and its sample's output
lengths (`bench.json`, which `bench` writes in the job folder, the `--output` of the
`generate` that follows), or a running job's own rate over them (`job_rates`: bench's shape,
the job's level). Without a bench result a job's projection has only its mean length and
rate: no tail is modelled, and it says so. One server holds `gpus_per_server` GPUs (the
spec's `[gpu] count`); N GPUs run N // that servers side by side, so wall time divides and
GPU-hours do not. `rests_on` says what it used.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specpilot.errors import UserError

BENCH_FILE = "bench.json"
SECONDS_PER_HOUR = 3600.0
#: rows a projection plays out one by one; beyond it the middle is added at the cap's rate
SIMULATED_ROWS_MAX = 20_000
#: the order the sample's lengths are repeated in (a projection is the same every time)
LENGTH_ORDER_SEED = 0
NO_TAIL = "no tail modelled: no bench sample's output lengths"

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
        kept = [p for p in moving if p[0] <= cap + 0.5]
        if len(kept) < len(moving) and not any(b >= cap - 0.5 for b, _, _ in kept):
            # the cap itself at the curve's own rate there (one second of it), read between the
            # measured batch sizes around it: a drain that fell from 51 in flight straight to 1
            # (every answer the same length) must not leave a cap of 26 at one request's speed
            kept.append((float(cap), self.rate_at(cap), 1.0))
        return BatchRates(tuple(sorted(kept, reverse=True)), min(self.largest, cap))

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


@dataclass(frozen=True)
class Rates:
    """What a projection rests on: one server's output rate at each number of requests in
    flight (`batch`, else only `output_tokens_per_s` at the cap, the same speed per request
    below it), the answers' output lengths and the running-request cap."""

    #: output tok/s one server sustains (the figure `source` quotes)
    output_tokens_per_s: float
    mean_output_tokens: float
    gpus_per_server: int
    source: str
    batch: BatchRates | None = None
    cap: int = 1
    #: the output lengths played (empty: only the mean is known, no tail is modelled)
    lengths: tuple[int, ...] = ()
    #: `batch`'s rates times this (a running job's own level over bench's)
    scale: float = 1.0

    def rate_at(self, batch: int) -> float:
        if self.batch is None:
            return self.output_tokens_per_s * min(batch, self.cap) / self.cap
        return self.batch.rate_at(batch) * self.scale


@dataclass(frozen=True)
class Projection:
    rows: int
    gpus: int
    servers: int
    gpu_hours: float
    wall_s: float
    rests_on: str
    #: the tail (from the last row's start to the end); None where it is not modelled
    tail_s: float | None = None

    @property
    def tail_share(self) -> float | None:
        if self.tail_s is None:
            return None
        return self.tail_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        share = self.tail_share
        return {
            "rows": self.rows,
            "gpus": self.gpus,
            "servers": self.servers,
            "gpu_hours": round(self.gpu_hours, 2),
            "wall_s": round(self.wall_s, 1),
            "tail_s": None if self.tail_s is None else round(self.tail_s, 1),
            "tail_share": None if share is None else round(share, 4),
            "rests_on": self.rests_on,
        }

    def line(self) -> str:
        hours = f"{self.gpu_hours:,.1f}" if self.gpu_hours >= 10 else f"{self.gpu_hours:.2f}"
        share = self.tail_share
        tail = f", {share:.1%} of it the tail" if share is not None else ""
        return (
            f"{self.rows:,} rows on {self.gpus} GPU{'s' if self.gpus != 1 else ''}: "
            f"{hours} GPU-hours, {wall_text(self.wall_s)} wall{tail} ({self.rests_on})"
        )


def wall_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes = round(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"


def project(rows: int, rates: Rates, gpus: int | None = None) -> Projection:
    """The time for `rows` more rows on `gpus` GPUs (default: one server's), played out
    (`project_job`) on `rates`."""
    gpus = rates.gpus_per_server if gpus is None else gpus
    if gpus < rates.gpus_per_server:
        raise UserError(
            f"{gpus} GPUs cannot hold one server of {rates.gpus_per_server} GPUs",
            field="--gpus",
            fix=f"pass --gpus {rates.gpus_per_server} or more (a multiple of the spec's [gpu] count)",
        )
    servers = gpus // rates.gpus_per_server
    used = servers * rates.gpus_per_server
    if rows <= 0 or rates.output_tokens_per_s <= 0:
        return Projection(rows, used, servers, 0.0, 0.0, rates.source, 0.0 if rates.lengths else None)
    lengths = rates.lengths or (max(1, round(rates.mean_output_tokens)),)
    job = project_job(
        lengths, rows, rates.cap, rates.rate_at, servers=servers, gpus_per_server=rates.gpus_per_server
    )
    return Projection(
        rows=rows,
        gpus=used,
        servers=servers,
        gpu_hours=job.gpu_hours,
        wall_s=job.wall_s,
        rests_on=rates.source if rates.lengths else f"{rates.source}; {NO_TAIL}",
        tail_s=job.tail_s if rates.lengths else None,
    )


@dataclass(frozen=True)
class BenchOutcome:
    """The part of a bench result a projection needs: the winner's rates, the input's size."""

    winner: str
    input_rows: int
    rates: Rates
    #: label -> that variant's rates, for every variant measured
    measured: dict[str, Rates]


def _rates(
    variant: dict[str, Any], mean: float, gpus_per_server: int, sample: tuple[int, ...], rows: int, when: str
) -> Rates:
    """One variant's rates; the output lengths are the sample's, every variant's alike
    (speculative decoding does not change what the model writes)."""
    points = tuple(
        (float(p["in_flight"]), float(p["output_tokens"]), float(p["seconds"]))
        for p in variant.get("rates_by_batch") or ()
    )
    cap = int(variant.get("max_running_requests") or 1)
    largest = int(variant.get("largest_in_flight") or math.ceil(max((p[0] for p in points), default=0)))
    batch = BatchRates(points, largest) if points else None
    if batch is not None and batch.rate_at(cap) <= 0:
        batch = None  # no progress measured: only the steady figure speaks
    return Rates(
        output_tokens_per_s=float(variant["output_tokens_per_s"]),
        mean_output_tokens=mean,
        gpus_per_server=gpus_per_server,
        source=(
            f"bench {when}, variant {variant['label']}: {variant['output_tokens_per_s']:,.0f} out tok/s "
            f"steady over {variant['steady_s']:.0f} s, {mean:,.0f} output tokens per row over "
            f"{rows} sampled rows"
            + (
                ""
                if batch is not None
                else "; no rates per batch size: the same speed per request below the cap"
            )
        ),
        batch=batch,
        cap=cap,
        lengths=sample,
    )


def read_bench(job_dir: Path) -> BenchOutcome | None:
    """The bench result in a job folder, None when there is none; a damaged one names its fix."""
    path = job_dir / BENCH_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        gpus = int(data["gpus_per_server"])
        when = str(data["finished_at"])
        rows = int(data["sample"]["rows"])
        winner = data["winner"]
        if winner is None:
            return None
        mean = float(data["mean_output_tokens"])
        sample = tuple(int(n) for n in data.get("output_lengths") or ())
        measured = {
            v["label"]: _rates(v, mean, gpus, sample, rows, when)
            for v in data["variants"]
            if v.get("output_tokens_per_s")
        }
        return BenchOutcome(
            winner=winner,
            input_rows=int(data["input_rows"]),
            rates=measured[winner],
            measured=measured,
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(
            f"{path} cannot be read as a bench result ({type(err).__name__}: {err})",
            field=str(path),
            fix="run `specpilot bench` again for this job, or delete the file",
        ) from None


def job_rates(
    *, done_rows: int, output_tokens: int, output_tokens_per_s: float, servers: int, over: str, job_dir: Path
) -> Rates | None:
    """The rates a running job shows, per server; None before its first row. With the job's
    bench result, the job is played on the bench winner's shape at the job's own level: its
    rates per batch size scaled to the job's rate, its sample's output lengths to the job's
    mean so far, its cap and GPUs per server; without one, one GPU per server at the job's
    rate and mean (no tail modelled), and it says so."""
    if done_rows <= 0 or output_tokens_per_s <= 0:
        return None
    bench = read_bench(job_dir)
    servers = max(servers, 1)
    mean = output_tokens / done_rows
    per_server = output_tokens_per_s / servers
    text = (
        f"this job: {output_tokens_per_s:,.0f} out tok/s {over} on {servers} server"
        f"{'s' if servers != 1 else ''}, {mean:,.0f} output tokens per row over {done_rows:,} rows"
    )
    if bench is None:
        return Rates(per_server, mean, 1, text + "; 1 GPU per server assumed (no bench.json)")
    shape = bench.rates
    at_cap = shape.rate_at(shape.cap)
    stretch = mean / shape.mean_output_tokens if shape.mean_output_tokens > 0 else 1.0
    return replace(
        shape,
        output_tokens_per_s=per_server,
        mean_output_tokens=mean,
        source=(
            f"{text}; waves and tail played on the bench winner {bench.winner}'s rates per batch size and "
            "sample lengths, scaled to this job's rate and mean"
        ),
        lengths=tuple(max(1, round(n * stretch)) for n in shape.lengths),
        scale=shape.scale * per_server / at_cap if at_cap > 0 else shape.scale,
    )
