"""What an engine's Prometheus series about speculative decoding look like, as data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecMetric:
    """A Prometheus series an engine exports about speculative decoding."""

    engine: str
    accepted: str | None  # counter of accepted draft tokens
    drafts: str | None  # counter of draft rounds (verify passes)
    gauge: str | None = None  # or a gauge that is already the mean acceptance length
    #: the engine source line that declares it (a public URL)
    source: str = ""
