"""vLLM's Prometheus series that specpilot reads (`/metrics`)."""

from __future__ import annotations

from specpilot.engines.metrics import PreemptionSignal, SpecMetric

#: counters; prometheus_client adds "_total" to a counter's declared name
SPEC_ACCEPTANCE = SpecMetric(
    "vllm",
    accepted="vllm:spec_decode_num_accepted_tokens_total",
    drafts="vllm:spec_decode_num_drafts_total",
    source="https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/spec_decode/metrics.py#L229",
)

#: a counter of the tokens generated (prometheus_client's "_total" added); where it is documented:
#: https://docs.vllm.ai/en/latest/usage/metrics.html
GENERATED_TOKENS = "vllm:generation_tokens_total"

#: a gauge of the requests in model execution batches (same page)
RUNNING_REQUESTS = "vllm:num_requests_running"

#: requests the V1 scheduler preempted for KV room (each recomputed later)
PREEMPTIONS = PreemptionSignal(
    "vllm",
    word="preemptions",
    counter="vllm:num_preemptions_total",
    source="https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/metrics/loggers.py",
)
