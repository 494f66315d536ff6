"""What vLLM does with its flags beyond argparse: the value ranges its config refuses.

The flags themselves are the per-release tables in flags/<release>.json
(tools/extract_vllm_flags.py), read through engines/flags.py; the oldest shipped one,
0.32.0, stands in for earlier releases.
"""

from __future__ import annotations

from specpilot.engines.ranges import ValueRange

_ARG_UTILS = "https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py"
_CACHE_CONFIG = "https://github.com/vllm-project/vllm/blob/main/vllm/config/cache.py"

#: what vLLM's config validation refuses at startup (every release covered)
VALUE_RANGES: tuple[ValueRange, ...] = (
    ValueRange("gpu_memory_utilization", 0, 1, above_minimum=True, source=_CACHE_CONFIG),
    ValueRange("max_model_len", 1, parse="human_int", special=("auto", "-1"), source=_ARG_UTILS),
    ValueRange("max_num_batched_tokens", 1, parse="human_int", source=_ARG_UTILS),
    ValueRange("kv_cache_memory_bytes", 1, parse="human_int", source=_ARG_UTILS),
    ValueRange("max_num_seqs", 1, source=_ARG_UTILS),
    ValueRange("tensor_parallel_size", 1, source=_ARG_UTILS),
    ValueRange("pipeline_parallel_size", 1, source=_ARG_UTILS),
    ValueRange("data_parallel_size", 1, source=_ARG_UTILS),
    ValueRange("block_size", 1, source=_CACHE_CONFIG),
)
