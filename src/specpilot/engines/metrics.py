"""What an engine's Prometheus series about speculative decoding look like, and how it says it
evicted running requests for KV room, as data."""

from __future__ import annotations

import re
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


@dataclass(frozen=True)
class PreemptionSignal:
    """How an engine says it took running requests off the GPU because the KV cache was full
    (vLLM preempts them, SGLang retracts them): each such request is computed again later, so
    a running-request cap that causes them is past the throughput's knee."""

    engine: str
    #: what the engine calls them, as the bench's table says it ("preemptions", "retractions")
    word: str
    #: a cumulative Prometheus counter of such requests (/metrics), or None
    counter: str | None
    #: a log line per event; its group `count` is the requests it took off (1 without the group)
    log_line: re.Pattern[str] | None = None
    #: the engine source that declares them (a public URL)
    source: str = ""
