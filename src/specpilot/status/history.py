"""The live job's history: per-server counters sampled once a second, plotted downsampled.

Samples hold cumulative counters, so a rate over any stretch is exact: (counter at its
end - at its start) / its duration. Downsampling to a few hundred points is then just
picking evenly spaced samples, whatever the history's length. To keep a week-long job's
history bounded, every other sample is dropped once `max_samples` is reached (the
resolution halves, the span stays whole).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

#: a plotted series: (unix time, value) points
Series = list[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class Sample:
    time_s: float
    #: per server, in `History.servers` order: cumulative rows and output tokens
    rows: tuple[int, ...]
    completion_tokens: tuple[int, ...]
    #: mean acceptance length at this moment (NaN when not known)
    accept_length: float


@dataclass
class History:
    servers: list[str]
    max_samples: int = 200_000
    samples: list[Sample] = field(default_factory=list)

    def record(self, sample: Sample) -> None:
        self.samples.append(sample)
        if len(self.samples) > self.max_samples:
            self.samples = self.samples[::2]

    def _boundaries(self, points: int) -> list[int]:
        """Indices of at most points+1 evenly spaced samples, first and last included."""
        count = len(self.samples)
        if count < 2:
            return []
        steps = min(points, count - 1)
        return sorted({round(k * (count - 1) / steps) for k in range(steps + 1)})

    def rate(self, server: int, counter: str, points: int) -> Series:
        """A counter's per-second rate for one server (`counter`: "rows" or "completion_tokens")."""
        marks = self._boundaries(points)
        series: Series = []
        for left, right in itertools.pairwise(marks):
            a, b = self.samples[left], self.samples[right]
            elapsed_s = b.time_s - a.time_s
            if elapsed_s > 0:
                delta = getattr(b, counter)[server] - getattr(a, counter)[server]
                series.append((b.time_s, delta / elapsed_s))
        return series

    def accept_length(self, points: int) -> Series:
        """Mean acceptance length per stretch (stretches with no value are left out)."""
        marks = self._boundaries(points)
        series: Series = []
        for left, right in itertools.pairwise(marks):
            values = [s.accept_length for s in self.samples[left + 1 : right + 1]]
            known = [v for v in values if not math.isnan(v)]
            if known:
                series.append((self.samples[right].time_s, sum(known) / len(known)))
        return series
