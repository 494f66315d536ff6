"""What vLLM does with its flags beyond argparse: the value ranges its config refuses.

The flags themselves are the per-release tables in flags/<release>.json
(tools/extract_vllm_flags.py), read through engines/flags.py; the oldest shipped one,
0.32.0, stands in for earlier releases.
"""

from __future__ import annotations

from specpilot.engines.flags import ReleaseTable, load_tables
from specpilot.engines.ranges import ValueRange


def release_tables() -> tuple[ReleaseTable, ...]:
    """vLLM's shipped tables, oldest first. Its FlexibleArgumentParser
    (vllm/utils/argparse_utils.py) rewrites argv before argparse sees it: `--max_num_seqs` is
    `--max-num-seqs`, `-O3` is `--optimization-level 3`, `--compilation-config.mode 3` sets one
    key of that JSON flag."""
    return load_tables("vllm", "specpilot.engines.vllm", flexible_parser=True)


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
