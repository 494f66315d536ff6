"""Rates per batch size from a sample's per-request token timings (`batch_rates`).

A bench sample measures two things a projection needs: how long the answers are (the output
lengths of its rows: speculative decoding does not change them) and how fast one server
writes at each number of requests in flight (`projection.BatchRates`, read here from the
per-request token timings: the steady part gives the rate at the running-request cap, the
drain at the end of the sample gives it at every lower count). The job is then played out on
them by `projection.project_job`, the one model of waves and tail that bench, `plan --job`,
`generate` and `report` share.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from specpilot.bench.client import RequestTiming
from specpilot.bench.steady import chunk_times, in_flight_changes
from specpilot.projection import BatchRates

#: the drain's rates are pooled over neighbouring batch sizes until each pool holds this many
#: output tokens and this share of the sample's time (one batch size alone may last one short
#: gap between two answers: too noisy)
POOL_TOKENS = 256.0
POOL_SHARE = 0.01


def batch_rates(requests: Sequence[RequestTiming]) -> BatchRates:
    """Per in-flight count, the tokens that arrived and the seconds spent there, pooled.

    A count that lasts less than the median gap between two chunks of one request (one engine
    step) is no batch the engine ran: it is the client's refill lag after an answer (often
    while it reads a burst of chunks), so its time and tokens count with the count before it.
    """
    changes = in_flight_changes(requests)
    edges = sorted(changes)
    if len(edges) < 2:
        return BatchRates((), 0)
    gaps = sorted(gap for r in requests for gap in r.itl_s)
    step_s = gaps[len(gaps) // 2] if gaps else 0.0
    seconds, tokens = _per_batch(edges, changes, _token_stamps(requests), step_s)
    return BatchRates(_pooled(seconds, tokens), max(seconds, default=0))


def _token_stamps(requests: Sequence[RequestTiming]) -> list[tuple[float, float]]:
    """(when, tokens) of every answered request's chunks, in time order: a chunk carries an
    equal share of its request's output tokens."""
    stamps: list[tuple[float, float]] = []
    for r in requests:
        if r.latency_s <= 0:
            continue
        times = chunk_times(r)
        stamps += [(t, r.output_tokens / len(times)) for t in times]
    return sorted(stamps)


def _per_batch(
    edges: list[float], changes: dict[float, int], stamps: list[tuple[float, float]], step_s: float
) -> tuple[dict[int, float], dict[int, float]]:
    """Seconds and tokens per number in flight between the edges; a count shorter than
    `step_s` counts with the one before it."""
    seconds: dict[int, float] = {}
    tokens: dict[int, float] = {}
    in_flight, cursor, level = 0, 0, 0
    for here, after in itertools.pairwise(edges):
        in_flight += changes[here]
        got, cursor = _tokens_until(stamps, cursor, here, after, first=here == edges[0])
        if in_flight <= 0:
            continue  # nothing in flight: no rate to read
        if after - here >= step_s or level == 0:
            level = in_flight
        seconds[level] = seconds.get(level, 0.0) + (after - here)
        tokens[level] = tokens.get(level, 0.0) + got
    return seconds, tokens


def _tokens_until(
    stamps: list[tuple[float, float]], cursor: int, here: float, after: float, *, first: bool
) -> tuple[float, int]:
    """The tokens stamped in (here, after] (the first edge's own stamps too), and the cursor past them."""
    got = 0.0
    while cursor < len(stamps) and stamps[cursor][0] <= after:
        if stamps[cursor][0] > here or (stamps[cursor][0] == here and first):
            got += stamps[cursor][1]
        cursor += 1
    return got, cursor


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
