"""SGLang's Prometheus series that specpilot reads (`/metrics`, with --enable-metrics)."""

from __future__ import annotations

import re

from specpilot.engines.metrics import PreemptionSignal, SpecMetric

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

#: a gauge of the requests in the running batch (same page)
RUNNING_REQUESTS = "sglang:num_running_reqs"

#: a decode batch that no longer fits the KV cache retracts requests back to the queue: the
#: scheduler logs every retraction (any release, no --enable-metrics needed); releases with
#: --enable-metrics also count them (`num_retracted_requests_total`; older ones keep only a
#: gauge that resets at each publish, never read here)
RETRACTIONS = PreemptionSignal(
    "sglang",
    word="retractions",
    counter="sglang:num_retracted_requests_total",
    log_line=re.compile(r"KV cache pool is full\. Retract requests\. #retracted_reqs: (?P<count>\d+)"),
    source="https://github.com/sgl-project/sglang/blob/v0.5.17/python/sglang/srt/managers/scheduler.py",
)
