"""vLLM's per-release flag tables (flags/<release>.json, from tools/extract_vllm_flags.py).

`release_flags(version)` is the hook `specpilot.engines.args.flag_table` calls: every flag of
`vllm serve` as `FlagDef`s, from the newest shipped table at or below `version` (the oldest
shipped one, 0.32.0, stands in for earlier releases).
"""

from __future__ import annotations

from packaging.version import Version

from specpilot.check.flagtable import table_for
from specpilot.check.ranges import ValueRange
from specpilot.engines.args import FlagDef, flag_kind

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


def release_flags(version: str) -> list[FlagDef]:
    table = table_for("vllm", Version(version))
    return [
        FlagDef(
            name=f.name,
            dest=f.dest,
            kind="json" if f.dest == "speculative_config" else flag_kind(f.kind),
            default=f.default,
            aliases=tuple(a for a in f.aliases if not a.startswith("--no-")),
            choices=f.choices,
            negatable=any(a.startswith("--no-") for a in f.aliases),
        )
        for f in table.flags
    ]
