"""From resolved vLLM inputs (plain numbers) to what vLLM will allocate and print.

`VllmInputs` is everything the arithmetic needs, already resolved from the spec, the
model shape, the engine flags and the engine's defaults; `allocate` chains the
quantities of `quantities` the way vLLM does at startup.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpilot.plan.vllm import quantities as mem


@dataclass(frozen=True)
class VllmInputs:
    """The numbers vLLM's startup arithmetic depends on, per GPU where it matters."""

    gpu_total_bytes: int
    gpu_memory_utilization: float
    tp_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    # geometry
    attention_layers: int  # target full-attention layers + draft (MTP) attention layers
    mamba_layers: int  # Gated-DeltaNet layers
    attention_bytes_per_token_per_layer: int
    mamba_state_bytes_per_layer: int  # conv + SSM, unpadded, per request per GPU
    num_speculative_tokens: int
    prefix_caching: bool
    block_size_tokens: int = mem.DEFAULT_BLOCK_SIZE_TOKENS
    full_cudagraphs: bool = False  # hybrid default FULL_AND_PIECEWISE unless --enforce-eager
    available_kv_bytes_measured: int | None = None  # "Available KV cache memory" from a log


@dataclass(frozen=True)
class VllmAllocation:
    """What vLLM computes at startup, named as it prints it."""

    requested_bytes: int
    available_kv_bytes: int
    block_size_tokens: int
    page_bytes: int
    groups: mem.KvGroups
    mamba_blocks_per_request_per_group: int
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_tokens: int
    one_request_bytes: int
    largest_max_model_len: int

    @property
    def fits_one_request(self) -> bool:
        """vLLM refuses to start unless one max_model_len request fits in the KV budget."""
        return 0 < self.one_request_bytes <= self.available_kv_bytes


def allocate(inputs: VllmInputs) -> VllmAllocation:
    """Chain vLLM's startup arithmetic: budget, page size, groups, blocks, printed numbers."""
    requested = mem.requested_memory_bytes(inputs.gpu_total_bytes, inputs.gpu_memory_utilization)
    if inputs.available_kv_bytes_measured is not None:
        available = inputs.available_kv_bytes_measured
    else:
        available = mem.available_kv_cache_bytes(
            requested,
            inputs.weights_bytes,
            inputs.activation_peak_bytes,
            inputs.non_torch_bytes,
            inputs.cudagraph_bytes,
        )
    if inputs.mamba_layers:
        block_size = mem.hybrid_attention_block_size_tokens(
            inputs.mamba_state_bytes_per_layer,
            inputs.attention_bytes_per_token_per_layer,
            block_size_tokens=inputs.block_size_tokens,
        )
    else:
        block_size = inputs.block_size_tokens
    # The mamba page is padded up to the attention page (interface.py), so one page size.
    page = block_size * inputs.attention_bytes_per_token_per_layer
    groups = mem.kv_cache_groups(inputs.attention_layers, inputs.mamba_layers)
    mode = mem.mamba_cache_mode(inputs.prefix_caching)
    mamba_blocks = mem.mamba_blocks_per_request_per_group(
        mode, inputs.num_speculative_tokens, inputs.max_model_len, block_size
    )
    num_blocks = mem.num_kv_blocks(available, page, groups.group_size_layers)
    per_request = mem.blocks_per_request(inputs.max_model_len, block_size, groups, mamba_blocks)
    concurrency = mem.max_concurrency(num_blocks, per_request)
    return VllmAllocation(
        requested_bytes=requested,
        available_kv_bytes=available,
        block_size_tokens=block_size,
        page_bytes=page,
        groups=groups,
        mamba_blocks_per_request_per_group=mamba_blocks,
        num_blocks=num_blocks,
        blocks_per_request=per_request,
        max_concurrency=concurrency,
        kv_tokens=mem.printed_kv_tokens(concurrency, inputs.max_model_len),
        one_request_bytes=mem.kv_bytes_needed_for_one_request(
            inputs.max_model_len, block_size, groups, mamba_blocks, page
        ),
        largest_max_model_len=mem.largest_max_model_len(
            max(available, 0), block_size, groups, page, mamba_blocks, 1 << 22
        ),
    )
