"""vLLM's memory arithmetic, one named quantity per function, bytes in and bytes out.

Each docstring states the accounting rule and where vLLM applies it (paths are in the
vllm 0.26.0 wheel; 0.32.0 is the same unless `specpilot.engines.vllm.releases` says
otherwise). Nothing here reads files or knows about specs: `specpilot.plan.vllm.planner` feeds it
numbers, and the measured constants come from the release line (`VllmLine`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from specpilot.engines.vllm.releases import SamplerCost, VllmLine
from specpilot.plan.types import GIB

# Smallest kernel block of the CUDA attention backends (FLASH_ATTN: MultipleOf(16),
# FLASHINFER: [16, 32, 64]) and CacheConfig.DEFAULT_BLOCK_SIZE.
DEFAULT_BLOCK_SIZE_TOKENS = 16

MambaCacheMode = Literal["none", "align", "all"]


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as vLLM's `cdiv`."""
    return -(a // -b)


def requested_memory_bytes(total_memory_bytes: int, gpu_memory_utilization: float) -> int:
    """Memory vLLM may use on one GPU: ceil(total x gpu_memory_utilization).

    v1/worker/utils.py:request_memory. The total is what the driver reports
    (cudaMemGetInfo), not the free memory; vLLM refuses to start when free < this.
    """
    return math.ceil(total_memory_bytes * gpu_memory_utilization)


def available_kv_cache_bytes(
    requested_bytes: int,
    weights_bytes: int,
    activation_peak_bytes: int,
    non_torch_bytes: int,
    cudagraph_bytes: int,
) -> int:
    """ "Available KV cache memory": requested minus everything that is not KV cache.

    gpu_worker.py:determine_available_memory: non-KV = weights ("Model loading took")
    + torch peak increase of the profile run (peak activation) + non-torch increase
    (NCCL, cuBLAS workspaces) + the CUDA graph pool estimate (counted since 0.21 unless
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0; 0 with --enforce-eager).
    """
    return requested_bytes - weights_bytes - activation_peak_bytes - non_torch_bytes - (cudagraph_bytes)


def hybrid_attention_block_size_tokens(
    mamba_state_bytes: int,
    attention_bytes_per_token: int,
    block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
    kernel_block_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
) -> int:
    """Attention block size vLLM picks so one attention page holds one mamba state.

    platforms/interface.py:_align_hybrid_block_size (mamba_cache_mode none/align):
    alignment = max(kernel's smallest block, current block size); block =
    alignment x cdiv(mamba page, alignment x attention bytes per token); only raised,
    never lowered below the configured block size. Logged as "Setting attention block
    size to N tokens".
    """
    alignment = max(kernel_block_tokens, block_size_tokens)
    aligned = alignment * cdiv(mamba_state_bytes, alignment * attention_bytes_per_token)
    return max(block_size_tokens, aligned)


@dataclass(frozen=True)
class KvGroups:
    """How vLLM splits layers into KV cache groups that share one block pool."""

    group_size_layers: int
    attention_groups: int
    mamba_groups: int


def kv_cache_groups(attention_layers: int, mamba_layers: int) -> KvGroups:
    """Groups of equal layer count, one block table each, all drawing from one pool.

    kv_cache_utils.py:_get_kv_cache_groups_uniform_page_size: group size = the smaller
    layer count, or the larger one when max < 1.5 x min (padding instead of splitting);
    each kind is cut into cdiv(layers, group size) groups. Only one kind: one group.
    Draft (MTP) attention layers count as attention layers.
    """
    if mamba_layers == 0 or attention_layers == 0:
        return KvGroups(
            group_size_layers=max(attention_layers, mamba_layers),
            attention_groups=1 if attention_layers else 0,
            mamba_groups=1 if mamba_layers else 0,
        )
    smaller, larger = sorted((attention_layers, mamba_layers))
    group_size = larger if larger < smaller * 1.5 else smaller
    return KvGroups(
        group_size_layers=group_size,
        attention_groups=cdiv(attention_layers, group_size),
        mamba_groups=cdiv(mamba_layers, group_size),
    )


def mamba_cache_mode(prefix_caching: bool, supports_all_mode: bool = False) -> MambaCacheMode:
    """Mamba cache mode: "none" without prefix caching; with it "all" or "align".

    models/config.py:MambaModelConfig.verify_and_update_config. GDN models (Qwen3-Next,
    Qwen3.5) do not support "all", so prefix caching means "align".
    """
    if not prefix_caching:
        return "none"
    return "all" if supports_all_mode else "align"


def mamba_blocks_per_request_per_group(
    mode: MambaCacheMode, num_speculative_tokens: int, max_model_len: int, block_size: int
) -> int:
    """Pool blocks one request holds in each mamba group.

    kv_cache_interface.py:MambaSpec.max_memory_usage_bytes / page: "none": 1 + num_spec,
    "align": 2 + num_spec, "all": cdiv(max_model_len, block) + num_spec.
    """
    if mode == "all":
        return cdiv(max_model_len, block_size) + num_speculative_tokens
    return (2 if mode == "align" else 1) + num_speculative_tokens


def num_kv_blocks(available_bytes: int, page_bytes: int, group_size_layers: int) -> int:
    """Blocks in the shared pool: available // page // group size.

    kv_cache_utils.py:get_num_blocks. One block spans one page in each of the
    group_size tensors (a tensor is shared by one layer of every group).
    """
    if available_bytes <= 0:
        return 0
    return int(available_bytes // page_bytes // group_size_layers)


def blocks_per_request(
    max_model_len: int, block_size: int, groups: KvGroups, mamba_blocks_per_group: int
) -> int:
    """Pool blocks one request of max_model_len tokens needs across all groups.

    kv_cache_utils.py:get_max_concurrency_for_kv_cache_config: sum over groups of
    cdiv(max memory usage, page); full attention needs cdiv(len, block) per group.
    """
    return groups.attention_groups * cdiv(max_model_len, block_size) + (
        groups.mamba_groups * mamba_blocks_per_group
    )


def max_concurrency(num_blocks: int, blocks_needed_per_request: int) -> float:
    """ "Maximum concurrency for L tokens per request": num_blocks / blocks per request.

    Zero blocks per request only happens for a zero-token length (no length fits at
    all), which serves nothing.
    """
    return num_blocks / blocks_needed_per_request if blocks_needed_per_request > 0 else 0.0


def printed_kv_tokens(concurrency: float, max_model_len: int) -> int:
    """ "GPU KV cache size: N tokens" = int(max_concurrency x max_model_len).

    kv_cache_utils.py:get_kv_cache_capacity (0.2x and 0.3x). Not blocks x block size:
    on hybrid models the mamba groups' blocks are not tokens.
    """
    return int(concurrency * max_model_len)


def kv_bytes_needed_for_one_request(
    max_model_len: int,
    block_size: int,
    groups: KvGroups,
    mamba_blocks_per_group: int,
    page_bytes: int,
) -> int:
    """KV memory one max_model_len request needs; vLLM refuses to start above available.

    kv_cache_utils.py:_max_memory_usage_bytes_from_groups: group size x page x blocks.
    """
    return (
        groups.group_size_layers
        * page_bytes
        * blocks_per_request(max_model_len, block_size, groups, mamba_blocks_per_group)
    )


def largest_max_model_len(
    available_bytes: int,
    block_size: int,
    groups: KvGroups,
    page_bytes: int,
    mamba_blocks_per_group: int,
    upper_tokens: int,
) -> int:
    """Largest max_model_len whose one request fits (vLLM's estimate_max_model_len), 0 if none."""

    def fits(length: int) -> bool:
        need = kv_bytes_needed_for_one_request(length, block_size, groups, mamba_blocks_per_group, page_bytes)
        return need <= available_bytes

    if not fits(1):
        return 0
    low, high, best = 1, upper_tokens, 1
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


#: the platform's default largest CUDA graph, tokens (config/compilation.py; 1024 on data
#: center Blackwell, not modelled)
MAX_CUDAGRAPH_CAPTURE_SIZE = 512


def max_cudagraph_capture_size(max_num_seqs: int) -> int:
    """Largest captured batch: min(2 x max_num_seqs, 512) (config/vllm.py defaults)."""
    return min(max_num_seqs * 2, MAX_CUDAGRAPH_CAPTURE_SIZE)


ModelRunner = Literal["v1", "v2"]


def sampler_cost(line: VllmLine, runner: ModelRunner, speculative: bool) -> SamplerCost:
    """The dummy sampler's cost for the model runner vLLM picks, as the release line measured it."""
    if runner == "v2":
        return line.v2_sampler
    return line.v1_speculative_sampler if speculative else line.v1_sampler


def activation_peak_bytes_estimate(
    batched_tokens: int,
    hidden_size: int,
    widest_projection: int,
    sampled_rows: int,
    vocab_size: int,
    act_dtype_bytes: int,
    sampler: SamplerCost,
    gdn_chunk_state_bytes: int = 0,
) -> int:
    """Estimated torch peak increase of vLLM's profile run (the "peak activation").

    gpu_model_runner.py:profile_run (and gpu/model_runner.py for the V2 runner) runs one
    forward of max_num_batched_tokens tokens, then the dummy sampler on min(max_num_seqs,
    tokens) rows over the full vocabulary (logits are all-gathered under TP); the peak is
    the larger of the two. Forward: the widest per-GPU projection output (MLP gate_up,
    MoE expert buffers or GDN in_proj) plus ~4 hidden-size copies per token; hybrid
    models add the chunked delta-rule states of one GDN layer (`gdn_chunk_state_bytes`).
    Sampler: rows x vocab x `sampler.bytes_per_element`. An estimate; a log's "peak
    activation" replaces it.
    """
    forward = batched_tokens * (widest_projection + 4 * hidden_size) * act_dtype_bytes + (
        gdn_chunk_state_bytes
    )
    sampled = sampled_rows * vocab_size * sampler.bytes_per_element(act_dtype_bytes)
    return max(forward, sampled)


GDN_CHUNK_TOKENS = 64


def gdn_chunk_state_bytes(batched_tokens: int, ssm_state_bytes: int) -> int:
    """Per-chunk recurrent states the chunked delta-rule prefill keeps for one GDN layer:
    cdiv(tokens, 64) SSM states (v_heads/TP x v_dim x k_dim) at the activation dtype
    (third_party/flash_linear_attention/ops/chunk_delta_h.py: h = k.new_empty(B, NT, H, V, K))."""
    return cdiv(batched_tokens, GDN_CHUNK_TOKENS) * ssm_state_bytes


def non_torch_bytes_estimate(tp_size: int, line: VllmLine) -> int:
    """Memory outside torch's allocator that grows during startup (cuBLAS/NCCL buffers):
    the line's one-GPU figure (measured), or its tensor-parallel one."""
    return int((line.non_torch_gib if tp_size == 1 else line.non_torch_tp_gib) * GIB)


def cudagraph_bytes_estimate(enforce_eager: bool, capture_size: int, line: VllmLine) -> int:
    """CUDA graph pool the profiler subtracts: 0 with --enforce-eager, else the line's
    estimate, linear in the largest captured batch."""
    if enforce_eager:
        return 0
    return int((line.cudagraph_base_gib + line.cudagraph_per_512_gib * capture_size / 512) * GIB)
