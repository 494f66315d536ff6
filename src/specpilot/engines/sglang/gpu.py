"""Defaults SGLang picks from the GPU's memory size (server_args.py `_handle_gpu_memory_settings`)."""

from __future__ import annotations

from dataclasses import dataclass

MIB_PER_GIB = 1024


@dataclass(frozen=True)
class GpuDefaults:
    """One row: the defaults of every GPU with less memory than `below_mib`."""

    below_mib: float
    chunked_prefill_size: int
    cuda_graph_max_bs_small_tp: int
    cuda_graph_max_bs_large_tp: int


#: (T4 | A10/4090/5090 | A100-40G/L40 | H100 | H20/H200/96 GB | B200) -- tp < 4 vs tp >= 4
GPU_DEFAULTS: tuple[GpuDefaults, ...] = (
    GpuDefaults(20 * 1024, 2048, 8, 8),
    GpuDefaults(35 * 1024, 2048, 24, 80),
    GpuDefaults(60 * 1024, 4096, 32, 160),
    GpuDefaults(90 * 1024, 8192, 256, 512),
    GpuDefaults(160 * 1024, 8192, 256, 512),
    GpuDefaults(float("inf"), 16384, 512, 512),
)
#: from this tensor-parallel size on, the larger CUDA-graph batch applies
LARGE_TP = 4


def gpu_defaults(gpu_memory_gib: float) -> GpuDefaults:
    """The row for a GPU of this size."""
    gpu_memory_mib = gpu_memory_gib * MIB_PER_GIB
    return next(row for row in GPU_DEFAULTS if gpu_memory_mib < row.below_mib)


def cuda_graph_max_bs(gpu_memory_gib: float, tp_size: int) -> int:
    row = gpu_defaults(gpu_memory_gib)
    return row.cuda_graph_max_bs_small_tp if tp_size < LARGE_TP else row.cuda_graph_max_bs_large_tp
