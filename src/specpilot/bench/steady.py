"""Steady-state output throughput and latency percentiles from per-request timings.

The window is SGLang's `steady_state_serving` definition (python/sglang/benchmark/
steady_state.py, https://github.com/sgl-project/sglang/pull/30918): the longest continuous
interval in which the requests in flight stay at or above `ratio` of their peak (ceil),
which leaves out the ramp-up and the drain. A request's output tokens count in the
window in proportion to its token chunks that arrive inside it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from specpilot.bench.client import RequestTiming

#: SGLang's default share of the peak concurrency that bounds the window
STEADY_RATIO = 0.9
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    threshold: int
    peak: int

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def steady_window(requests: Sequence[RequestTiming], ratio: float = STEADY_RATIO) -> Window | None:
    """The longest interval with at least ceil(ratio x peak) requests in flight; None without
    two distinct event times (nothing answered)."""
    spans = _spans(in_flight_changes(requests))
    if not spans:
        return None
    peak = max(count for _, _, count in spans)
    threshold = max(1, math.ceil(peak * ratio))
    best = _longest_at_least(spans, threshold)
    if best is None or best[1] <= best[0]:
        return None
    return Window(best[0], best[1], threshold, peak)


def in_flight_changes(requests: Sequence[RequestTiming]) -> dict[float, int]:
    """When the number of answered requests in flight changes, and by how much."""
    changes: dict[float, int] = {}
    for r in requests:
        if r.latency_s <= 0:
            continue
        changes[r.start_s] = changes.get(r.start_s, 0) + 1
        end_s = r.start_s + r.latency_s
        changes[end_s] = changes.get(end_s, 0) - 1
    return changes


def chunk_times(request: RequestTiming) -> list[float]:
    """When each of the request's token chunks arrived."""
    times = [request.start_s + request.ttft_s]
    for gap in request.itl_s:
        times.append(times[-1] + gap)
    return times


def _spans(changes: dict[float, int]) -> list[tuple[float, float, int]]:
    """(start, end, requests in flight) between each change and the next."""
    spans: list[tuple[float, float, int]] = []
    in_flight = 0
    for here, after in itertools.pairwise(sorted(changes)):
        in_flight += changes[here]
        spans.append((here, after, in_flight))
    return spans


def _longest_at_least(spans: list[tuple[float, float, int]], threshold: int) -> tuple[float, float] | None:
    """The longest continuous stretch of spans with at least `threshold` requests in flight."""
    best: tuple[float, float] | None = None
    open_at: float | None = None
    for index, (start, end, count) in enumerate(spans):
        if count >= threshold and open_at is None:
            open_at = start
        closes = count < threshold or index == len(spans) - 1
        if open_at is not None and closes:
            close_at = end if count >= threshold else start
            if best is None or close_at - open_at > best[1] - best[0]:
                best = (open_at, close_at)
            open_at = None
    return best


def tokens_in_window(requests: Sequence[RequestTiming], window: Window) -> float:
    """Output tokens inside the window: each request's tokens times the share of its chunks there."""
    total = 0.0
    for r in requests:
        stamps = chunk_times(r)
        inside = sum(1 for t in stamps if window.start_s <= t <= window.end_s)
        total += r.output_tokens * inside / len(stamps)
    return total


def percentiles_ms(values_s: Sequence[float]) -> dict[str, float] | None:
    """p50/p90/p99 in milliseconds (nearest rank), None for no values."""
    if not values_s:
        return None
    ordered = sorted(values_s)
    return {
        f"p{p}": round(1000 * ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)], 2)
        for p in PERCENTILES
    }
