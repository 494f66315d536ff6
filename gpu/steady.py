"""The server's steady-state output rate, from its own view: the same for every client.

SGLang's `benchmark/steady_state_serving.py` (0.5.23) reports throughput over the longest
interval whose concurrency stays at or above a ratio (0.9) of the peak: ramp-up and the tail
are left out. 0.5.17 lacks that script, so the same window is taken here from the server side,
which is the same for every client: each `Decode batch, #running-req: N, ... gen throughput
(token/s): R` line (one per `--decode-log-interval` decode steps), stamped as it lands in the
log. The rate of a window is the time-weighted mean of R over its lines (R covers the interval
since the previous decode line, so that is tokens over seconds). vLLM prints no such line per
step; gpu/e2e_tools.py samples its /metrics instead (`from_samples`), giving rows of the same shape.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

DECODE = re.compile(r"Decode batch.*?#running-req: (\d+),.*?gen throughput \(token/s\): ([0-9.]+)")
ACCEPT = re.compile(r"accept len: ([0-9.]+)")
STEADY_RATIO = 0.9
#: a decode line this many times the median interval after the previous one covers a prefill
PREFILL_GAP_RATIO = 1.5
#: (stamp, running requests, gen tok/s, accept length or None): a decode line, or a sampled interval
Line = tuple[float, int, float, float | None]


def read_lines(path: Path) -> list[Line]:
    """(stamp, running requests, gen tok/s, accept length or None) for each decode line of a stamped log."""
    found: list[Line] = []
    for line in path.read_text(errors="replace").split("\n"):
        stamp, _, text = line.partition("\t")
        match = DECODE.search(text)
        if match and re.fullmatch(r"[0-9.]+", stamp):
            accept = ACCEPT.search(text)
            found.append((float(stamp), int(match[1]), float(match[2]), float(accept[1]) if accept else None))
    return found


def window(lines: list[Line], start: float, end: float) -> dict[str, Any]:
    """The longest run of consecutive decode lines in [start, end] at >= 0.9 x the peak running count."""
    inside = [row for row in lines if start <= row[0] <= end]
    if len(inside) < 3:
        return {"lines": len(inside)}
    peak = max(row[1] for row in inside)
    if peak == 0:  # the server ran nothing in the client's time (a client that failed)
        return {"lines": len(inside), "peak_running": 0}
    runs: list[tuple[int, int]] = []
    first: int | None = None
    for index, row in enumerate(inside):
        if row[1] >= STEADY_RATIO * peak:
            first = index if first is None else first
        elif first is not None:
            runs.append((first, index - 1))
            first = None
    if first is not None:
        runs.append((first, len(inside) - 1))
    lo, hi = max(runs, key=lambda run: inside[run[1]][0] - inside[run[0]][0])
    # the first line of the window opens it: its rate covers time before the window
    rows = inside[lo : hi + 1]
    seconds = sum(b[0] - a[0] for a, b in itertools.pairwise(rows))
    tokens = sum(b[2] * (b[0] - a[0]) for a, b in itertools.pairwise(rows))
    accepts = [row[3] for row in rows if row[3] is not None]
    return {
        "lines": len(inside),
        "peak_running": peak,
        "window_lines": len(rows),
        "window_s": round(seconds, 2),
        "output_tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
        "mean_running": round(sum(row[1] for row in rows) / len(rows), 1),
        "accept_length": round(sum(accepts) / len(accepts), 3) if accepts else None,
    }


def from_samples(samples: list[tuple[float, int, float]]) -> list[Line]:
    """Rows of the decode-line shape from periodic samples of a server's counters, each
    (stamp, running requests, generated tokens so far): the rate is the tokens since the
    previous sample over the seconds since it."""
    return [
        (b[0], b[1], (b[2] - a[2]) / (b[0] - a[0]), None)
        for a, b in itertools.pairwise(samples)
        if b[0] > a[0]
    ]


def decode_rate(lines: list[Line], start: float, end: float) -> float | None:
    """Mean gen tok/s of the decode lines in [start, end] at >= 0.9 x the peak running count,
    leaving out each line whose interval covers a prefill (a gap over 1.5 x the median): the
    server's pure decoding speed, whatever the waves of a short run do to the steady window."""
    inside = [row for row in lines if start <= row[0] <= end]
    if len(inside) < 3:
        return None
    peak = max(row[1] for row in inside)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(inside)]
    usual = sorted(gaps)[len(gaps) // 2]
    rates = [
        row[2]
        for row, gap in zip(inside[1:], gaps, strict=True)
        if row[1] >= STEADY_RATIO * peak and gap <= PREFILL_GAP_RATIO * usual
    ]
    return round(sum(rates) / len(rates), 1) if rates else None
