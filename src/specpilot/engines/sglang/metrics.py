"""SGLang's Prometheus series that specpilot reads (`/metrics`, with --enable-metrics)."""

from __future__ import annotations

from specpilot.engines.metrics import SpecMetric

#: a gauge: the mean accepted length of the last decode batches
SPEC_ACCEPTANCE = SpecMetric(
    "sglang",
    accepted=None,
    drafts=None,
    gauge="sglang:spec_accept_length",
    source="https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt/observability/metrics_collector.py#L512",
)
