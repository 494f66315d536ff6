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

#: a counter of the tokens generated (prometheus_client's "_total" added); where it is documented:
#: https://docs.sglang.io/references/production_metrics.html
GENERATED_TOKENS = "sglang:generation_tokens_total"
