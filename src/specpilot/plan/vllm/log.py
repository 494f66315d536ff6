"""Read the numbers a vLLM startup log prints, for calibration (`plan --from-log`).

The lines are declared in `engines/vllm/loglines.py` (the same declarations `up`
compares against the plan).
"""

from __future__ import annotations

from specpilot.engines.loglines import read_log
from specpilot.engines.vllm.loglines import QUANTITIES


def parse_vllm_log(text: str) -> dict[str, float | str]:
    """The startup numbers found in a vLLM log: version, weights, KV budget, KV tokens...

    Keys (present only when printed): version, weights_gib, available_kv_gib,
    kv_tokens, max_model_len, max_concurrency, attention_block_size, cudagraph_gib,
    free_before_load_gib, gpu_total_gib, gpu_memory_utilization, activation_peak_gib,
    non_torch_gib, consumed_gib, cudagraph_actual_gib (on the CPU backend gpu_total_gib is
    the node's memory).
    """
    return dict(read_log(QUANTITIES, text))
