"""SGLang's memory arithmetic, one named quantity per function.

The accounting follows the engine's own order (model_runner_kv_cache_mixin.py /
mem_cache/kv_cache_configurator.py):

1. `free_before_load` is sampled before any weight is loaded.
2. Weights are loaded (target; from 0.5.14 also the draft model).
3. `rest = free_after_load - free_before_load * (1 - mem_fraction_static)`: everything
   above the reserve `free_before_load * (1 - mem_fraction_static)` goes to pools.
4. Hybrid models split `rest` between the mamba state pool and the KV pool by
   `mamba_full_memory_ratio` (or take `--max-mamba-cache-size` slots first),
   after the speculative intermediate state.
5. KV tokens = what remains // bytes per token, rounded down to the page size.
6. max_running_requests follows from the token pool, the flag, and the state slots.

Everything allocated later (activations, CUDA graphs and, before 0.5.14, the draft
model and its KV cache) must fit in the reserve. Sizes are per GPU; "GB" in SGLang's
logs are GiB.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specpilot.engines.sglang.releases import SglangRelease
from specpilot.models.layers import GatedDeltaNetSpec, layer_specs
from specpilot.models.shape import ModelShape
from specpilot.plan.sglang.settings import SglangSettings, piecewise_graph_token_sizes
from specpilot.plan.types import GIB

#: Measured CUDA context + allocator + NCCL before weights load, per GPU (GiB): H100 80 GB
#: 0.71, MI355X 0.71, 4x RTX 4090 TP4 0.91 (tests/data/startup_logs/sglang/*.json).
CUDA_CONTEXT_GIB = 0.75
CUDA_CONTEXT_TP_EXTRA_GIB = 0.15
#: MiB per piecewise prefill graph: SGLang's own allowance in the default
#: mem_fraction_static (_handle_gpu_memory_settings).
PIECEWISE_GRAPH_MIB = 8.0
#: Bytes a breakable prefill graph (0.5.17) keeps per captured token per hidden unit per
#: layer. Real 0.5.17 starts on the H200 ("Capture target prefill CUDA graph end ... mem
#: usage", 8192 tokens): Qwen3.6-27B 2.86-2.90 GiB (1.15), Qwen3-8B 1.44 GiB (1.28); the
#: larger is kept so the term never under-counts.
BREAKABLE_GRAPH_BYTES_PER_TOKEN_HIDDEN_LAYER = 1.28
#: One captured decode-side graph family (target decode, or with a draft model: target
#: verify, draft decode, draft extend): a fixed part plus a part per captured batch size.
#: Real 0.5.17 starts on the H200: decode 0.21 GiB at 42 sizes, 0.32 at 256; verify / draft
#: decode / draft extend 0.36-0.39 / 0.24-0.25 / 0.27-0.30 GiB at 21-23.
GRAPH_FAMILY_GIB = 0.30
GRAPH_FAMILY_MIB_PER_BATCH = 0.5
#: "Constant meta data (e.g., from attention backend)" in the same heuristic; a draft
#: model brings its own attention backends.
ATTENTION_METADATA_MIB = 512.0
#: Memory the engine allocates between the pools and serving that no formula above
#: itemizes (kernel workspaces, allocator slack), measured from startup logs: Qwen3.5-27B
#: hybrid on H100 lost 2.87 GiB of its reserve before serving, 0.10 of it CUDA graphs and
#: 0.13 other itemized terms; Qwen3-0.6B dense on 16 GB lost 0.63 GiB to the attention
#: backend before graph capture.
UNITEMIZED_HYBRID_GIB = 2.5
UNITEMIZED_DENSE_GIB = 0.6
#: req_to_token entries beyond context_len (speculative decoding's extra room is at most a
#: few draft tokens; get_req_to_token_extra_context_len)
REQ_TO_TOKEN_EXTRA_TOKENS = 4
#: reserve_rope_cache_for_long_sequences (SGLANG_SPEC_EXPANSION_SAFETY_FACTOR,
#: SGLANG_ROPE_CACHE_SAFETY_MARGIN, SGLANG_ROPE_CACHE_ALIGN defaults, 0.5.13-0.5.17)
ROPE_SPEC_SAFETY_FACTOR = 2
ROPE_CACHE_MARGIN_POSITIONS = 256
ROPE_CACHE_ALIGN_POSITIONS = 128
#: the cos/sin cache stays float32 on CUDA (rotary_embedding/base.py)
ROPE_CACHE_DTYPE_BYTES = 4
#: Activation working set per prefill token, in units of hidden_size elements: residual,
#: normed input, attention output and the MLP's gate/up (2 x intermediate) at once.
ACTIVATION_HIDDEN_COPIES = 4


def cuda_context_gib(tp_size: int) -> float:
    """Memory gone before weights load: CUDA context, allocator pools, NCCL for TP > 1."""
    return CUDA_CONTEXT_GIB + (CUDA_CONTEXT_TP_EXTRA_GIB if tp_size > 1 else 0.0)


def free_before_load_gib(gpu_memory_gib: float, tp_size: int) -> float:
    """`pre_model_load_memory`: free memory the engine samples before loading weights."""
    return gpu_memory_gib - cuda_context_gib(tp_size)


def rope_cache_positions_reserved(s: SglangSettings) -> int:
    """`reserve_rope_cache_for_long_sequences`: the positions the engine wants the rotary cache
    to cover after the weights load: context + 2 x steps x draft tokens + 256, 128-aligned."""
    wanted = s.context_len + ROPE_SPEC_SAFETY_FACTOR * s.speculative_num_steps * s.num_draft_tokens
    wanted += ROPE_CACHE_MARGIN_POSITIONS
    return -(-wanted // ROPE_CACHE_ALIGN_POSITIONS) * ROPE_CACHE_ALIGN_POSITIONS


def rope_regrowth_gib(shape: ModelShape, s: SglangSettings, rules: SglangRelease) -> float:
    """Memory the rotary cache's regrowth keeps before the memory profile: none while the
    cache (max_position_embeddings rows, float32 on CUDA) already covers the reserved
    positions (`_ensure_cos_sin_cache_length`); else the release's measured share of it."""
    if rope_cache_positions_reserved(s) - 1 < shape.max_position_embeddings:
        return 0.0
    return rules.rope_regrowth_share * rope_cache_bytes(shape) / GIB


def embedding_params(shape: ModelShape) -> int:
    """Input embedding plus a separate LM head unless tied."""
    return shape.vocab_size * shape.hidden_size * (1 if shape.tie_word_embeddings else 2)


def target_weights_gib(shape: ModelShape, s: SglangSettings) -> float:
    """Target model weights per GPU.

    The MTP head is not part of the target (the draft worker loads it). Quantized
    checkpoints keep embeddings, LM head and vision tower in bf16; everything else
    is at the weights dtype. TP shards every matrix, embeddings included.
    """
    params = shape.param_count - shape.mtp_param_count
    if s.quantized:
        wide = embedding_params(shape) + shape.vision_param_count
        total_bytes = (params - wide) * s.weights_dtype_bytes + wide * 2
    else:
        total_bytes = params * s.weights_dtype_bytes
    return total_bytes / s.tp_size / GIB


def rope_cache_bytes(shape: ModelShape) -> int:
    """The rotary cos/sin cache: max_position_embeddings x rotary dims, float32 on CUDA;
    one instance shared by every layer (`get_rope` caches it)."""
    return shape.max_position_embeddings * shape.rotary_dim * ROPE_CACHE_DTYPE_BYTES


def draft_weights_gib(shape: ModelShape, s: SglangSettings) -> float:
    """Resident weights of a NEXTN/EAGLE MTP draft: its own layers only.

    The MTP module shares the target's embedding and LM head (eagle_worker
    `set_embed_and_head`), so only the decoder layer(s) and the `fc` projection stay.
    """
    if not s.has_draft_model:
        return 0.0
    return layer_specs(shape).mtp.weights_bytes(s.tp_size, s.weights_dtype_bytes) / GIB


def draft_load_transient_gib(shape: ModelShape, s: SglangSettings) -> float:
    """Extra memory while the draft loads: it builds its own embedding and LM head
    before they are swapped for the target's and freed (qwen3_5_mtp.set_embed_and_head)."""
    if not s.has_draft_model or not shape.mtp_num_layers:
        return 0.0
    return embedding_params(shape) * 2 / s.tp_size / GIB


def kv_bytes_per_token(shape: ModelShape, s: SglangSettings) -> int:
    """SGLang's `cell_size` for the target: K+V of a full-attention layer over the KV layers,
    per GPU. There is no MLA rule for SGLang: a latent-attention model is planned at its
    config's KV heads x head_dim."""
    attention = layer_specs(shape).full_attention
    return attention.kv_bytes_per_token(s.tp_size, s.kv_dtype_bytes) * shape.kv_cache_layers


def draft_kv_bytes_per_token(shape: ModelShape, s: SglangSettings) -> int:
    """The draft's KV cell: same per-layer size over its layers (its pool has as many tokens)."""
    if not s.has_draft_model:
        return 0
    attention = layer_specs(shape).full_attention
    return attention.kv_bytes_per_token(s.tp_size, s.kv_dtype_bytes) * s.draft_layers


def pool_cell_bytes(shape: ModelShape, s: SglangSettings, rules: SglangRelease) -> int:
    """Bytes the token pool budget pays per token.

    From 0.5.14 the draft's KV is folded in: `int(cell * (1 + draft_layers / layers))`
    (pool_configurator.DefaultPoolConfigurator); before, the draft KV is allocated
    afterwards from the reserve.
    """
    cell = kv_bytes_per_token(shape, s)
    if rules.draft_in_profile and rules.draft_kv_in_cell and s.has_draft_model and shape.kv_cache_layers:
        cell = int(cell * (1 + s.draft_layers / shape.kv_cache_layers))
    return cell


def gdn_layer(shape: ModelShape, tp_size: int) -> GatedDeltaNetSpec | None:
    """A Gated-DeltaNet layer as SGLang shards it: when TP does not divide the key-head groups,
    `extra_groups_for_head_shards` adds tp - groups of them (meant for one group), so there are
    tp; vLLM's `gated_delta_net_state_shape` does not pad. None without GDN layers."""
    gdn = layer_specs(shape).gated_delta_net
    if gdn is None or gdn.num_key_heads % tp_size == 0:
        return gdn
    return replace(gdn, num_key_heads=tp_size)


def state_bytes_per_request(shape: ModelShape, s: SglangSettings) -> int:
    """`mamba_cache_per_req`: conv (kernel - 1 positions, at SGLANG_MAMBA_CONV_DTYPE) + SSM
    state (at the SSM dtype, float32 by default) over all linear-attention layers, per GPU."""
    gdn = gdn_layer(shape, s.tp_size)
    if gdn is None:
        return 0
    per_layer = gdn.conv_state_bytes(s.tp_size, s.conv_dtype_bytes) + gdn.ssm_state_bytes(
        s.tp_size, s.ssm_dtype_bytes
    )
    return per_layer * shape.linear_attention_layers


def state_slots_per_request(s: SglangSettings) -> int:
    """`_calculate_mamba_ratio`: state slots the scheduler reserves per running request.

    1 without radix cache; otherwise 3 (running + radix checkpoints), plus the
    extra_buffer ping-pong: 2 with overlap scheduling, 1 without or in lazy mode.
    """
    if s.radix_cache_disabled:
        return 1
    extra = 0
    if s.extra_buffer:
        extra = 2 if s.overlap_schedule and s.mamba_strategy == "extra_buffer" else 1
    return 3 + extra


@dataclass(frozen=True)
class StatePool:
    """The hybrid state pool as SGLang sizes it."""

    slots: int
    state_gib: float
    intermediate_gib: float
    #: `rest` left for the KV pool
    rest_for_kv_gib: float


def _capped_requests(s: SglangSettings, slots: int, ratio: int) -> int:
    requests = s.max_running_requests or 0
    return min(requests // s.dp_size, slots // ratio)


def given_state_slots(s: SglangSettings) -> int | None:
    """Slots the flags fix: `--max-mamba-cache-size` (split over DP ranks), else one per
    `--max-running-requests` when radix cache is off; None when the memory decides."""
    if s.max_mamba_cache_size is not None:
        return s.max_mamba_cache_size // (s.dp_size if s.dp_size > 1 else 1)
    if s.radix_cache_disabled and s.max_running_requests is not None:
        return max(1, s.max_running_requests // s.dp_size)
    return None


def _speculating_requests(s: SglangSettings, rules: SglangRelease, slots: int, ratio: int) -> int:
    """Running requests that hold intermediate states next to `given_state_slots`: one per
    slot without radix cache; else the flag's count (<=0.5.12) or as many as the slots serve."""
    if s.max_mamba_cache_size is None:
        return slots
    if rules.intermediate_rule == "reserve_first":
        return s.max_running_requests or 0
    return _capped_requests(s, slots, ratio)


def _split_state_budget(
    s: SglangSettings, rules: SglangRelease, per_req: int, ratio: int, pad: int, rest_bytes: float
) -> tuple[int, float]:
    """(slots, intermediate bytes) when the memory decides: the state budget is
    rest x r / (1 + r), r = mamba_full_memory_ratio; speculation's intermediate states come
    off `rest` first (<=0.5.12) or share the budget with the slots (0.5.13+)."""
    draft = s.num_draft_tokens if s.speculative_algorithm else 0
    r = s.mamba_full_memory_ratio
    if draft and rules.intermediate_rule == "reserve_first":
        intermediate_bytes = per_req * (s.max_running_requests or 0) * draft
        budget = (rest_bytes - intermediate_bytes) * r / (1 + r)
        return int(budget // per_req), intermediate_bytes
    budget = rest_bytes * r / (1 + r)
    if draft:
        slots = int((budget - pad * per_req * (1 + draft)) // (per_req * (1 + draft / ratio)))
        return slots, per_req * (_capped_requests(s, slots, ratio) + pad) * draft
    return int((budget - pad * per_req) // per_req), 0.0


def state_pool(shape: ModelShape, s: SglangSettings, rules: SglangRelease, rest_gib: float) -> StatePool:
    """`handle_max_mamba_cache`: the mamba slots and what they take out of `rest`.

    Slots come from `--max-mamba-cache-size`, else from `--max-running-requests` when
    radix cache is off (`given_state_slots`), else from the ratio split
    (`_split_state_budget`). Speculative decoding adds an intermediate state per draft token
    per running request; 0.5.17+ also pays the padding slot.
    """
    per_req = state_bytes_per_request(shape, s)
    ratio = state_slots_per_request(s)
    draft = s.num_draft_tokens if s.speculative_algorithm else 0
    pad = 1 if rules.intermediate_rule == "joint_padded" else 0
    rest_bytes = rest_gib * GIB
    given = given_state_slots(s)
    if given is None:
        slots, intermediate_bytes = _split_state_budget(s, rules, per_req, ratio, pad, rest_bytes)
    else:
        slots = given
        intermediate_bytes = per_req * (_speculating_requests(s, rules, slots, ratio) + pad) * draft
    state_bytes = (slots + pad) * per_req
    return StatePool(
        slots=slots,
        state_gib=state_bytes / GIB,
        intermediate_gib=intermediate_bytes / GIB,
        rest_for_kv_gib=(rest_bytes - intermediate_bytes - state_bytes) / GIB,
    )


def kv_tokens(rest_for_kv_gib: float, cell_bytes: int, s: SglangSettings) -> int:
    """`max_total_num_tokens`: bytes left // bytes per token, page-aligned, capped by
    `--max-total-tokens`."""
    if cell_bytes <= 0 or rest_for_kv_gib <= 0:
        return 0
    tokens = int(rest_for_kv_gib * GIB) // cell_bytes
    if s.max_total_tokens is not None:
        tokens = min(tokens, s.max_total_tokens)
    return tokens // s.page_size * s.page_size


def max_running_requests(
    tokens: int, state_slots: int, s: SglangSettings, rules: SglangRelease, hybrid: bool
) -> int:
    """`_resolve_max_num_reqs`: concurrency the engine will schedule.

    Pool estimate = clamp(tokens / context_len * 512, 2048, 4096). Unset: min(estimate,
    tokens // 2). Set: min(flag / dp, estimate) before 0.5.14, min(flag / dp, tokens // 2)
    after. Hybrid: also at most state_slots // slots per request.
    """
    estimate = max(min(int(tokens / s.context_len * 512), 4096), 2048)
    if s.max_running_requests is not None:
        cap = estimate if rules.explicit_requests_cap == "pool_estimate" else tokens // 2
        requests = min(s.max_running_requests // s.dp_size, cap)
    else:
        requests = min(estimate, tokens // 2)
    if hybrid:
        requests = min(requests, state_slots // state_slots_per_request(s))
    return max(requests, 0)


def prefill_activation_gib(shape: ModelShape, s: SglangSettings, tokens: int | None = None) -> float:
    """Activations of one prefill forward of `tokens` (the chunk unless given), per GPU:
    tokens x (4 x hidden + 2 x intermediate/tp) elements at the weights' compute dtype (2 bytes)."""
    moe = layer_specs(shape).moe
    # a MoE config without num_experts_per_tok is planned with one expert per token
    moe_width = moe.gate_up_width(max(moe.experts_per_token, 1))
    mlp_width = max(2 * shape.intermediate_size, moe_width) // s.tp_size
    width = ACTIVATION_HIDDEN_COPIES * shape.hidden_size + mlp_width
    return (s.chunked_prefill_size if tokens is None else tokens) * width * 2 / GIB


def logits_rows(s: SglangSettings, requests: int) -> int:
    """Rows a decode/verify step scores during the start: the largest captured decode batch,
    min(cuda_graph_max_bs, the engine's resolved max_running_requests), times the draft tokens
    each verifies. The same whether the flag pinned the requests or the pool decided them;
    larger batches score more rows only while serving (`serving_logits_gib`)."""
    return max(min(s.cuda_graph_max_bs, requests), 1) * max(s.num_draft_tokens, 1)


def activation_gib(shape: ModelShape, s: SglangSettings, requests: int) -> float:
    """Peak activations of one prefill chunk plus the verify/decode logits, per GPU: fp32
    logits for every row a decode/verify step scores (`logits_rows`)."""
    logits_bytes = logits_rows(s, requests) * shape.vocab_size * 4 / s.tp_size
    return prefill_activation_gib(shape, s) + logits_bytes / GIB


def serving_logits_gib(shape: ModelShape, s: SglangSettings, requests: int) -> float:
    """fp32 logits of a full decode batch while serving: every running request's draft tokens
    (a batch above the captured sizes runs eagerly and scores all its rows at once)."""
    return max(requests, 1) * max(s.num_draft_tokens, 1) * shape.vocab_size * 4 / s.tp_size / GIB


def attention_workspace_gib(s: SglangSettings) -> float:
    """Attention backend buffers: SGLang's 512 MiB allowance, twice with a draft model."""
    return ATTENTION_METADATA_MIB * (2 if s.has_draft_model else 1) / 1024


def unitemized_runtime_gib(shape: ModelShape, rules: SglangRelease) -> float:
    """Runtime buffers no term itemizes, from measured startups (`SglangRelease`)."""
    return rules.unitemized_hybrid_gib if shape.is_hybrid else rules.unitemized_dense_gib


def req_to_token_gib(requests: int, s: SglangSettings) -> float:
    """The request -> token-slot table: (max_running_requests + 1) x context_len int32,
    allocated with the pools but outside the profiled budget."""
    return (requests + 1) * (s.context_len + REQ_TO_TOKEN_EXTRA_TOKENS) * 4 / GIB


def decode_graph_families(s: SglangSettings) -> int:
    """Decode-side graph families captured: target decode, or with a draft model target
    verify + draft decode + draft extend."""
    if s.cuda_graph_disabled:
        return 0
    return 3 if s.has_draft_model else 1


def decode_graphs_gib(
    s: SglangSettings, family_gib: float = GRAPH_FAMILY_GIB, mib_per_batch: float = GRAPH_FAMILY_MIB_PER_BATCH
) -> float:
    """Decode-side CUDA graphs, captured for batch sizes up to min(cuda_graph_max_bs,
    max_running_requests): `family_gib` plus `mib_per_batch` per size, per family."""
    batch = min(s.cuda_graph_max_bs, s.max_running_requests or s.cuda_graph_max_bs)
    per_family_gib = family_gib + mib_per_batch * batch / 1024
    return decode_graph_families(s) * per_family_gib


def captured_prefill_tokens(s: SglangSettings, rules: SglangRelease, requests: int) -> int:
    """The largest prefill token count captured as a graph (0: none). The flags configure the
    sizes up to `s.prefill_graph_max_tokens`; from 0.5.17 `capture_prefill_graph` keeps those
    up to max_capture_requests x context_length, max_capture_requests being the request pool's
    size (the running requests) for the breakable and piecewise backends
    (https://github.com/sgl-project/sglang, python/sglang/srt/model_executor/
    model_runner_components/cuda_graph_setup.py, v0.5.17). Only the target's: an MTP draft's
    prefill graph is turned off there because its attention layers are fewer than the config's
    num_hidden_layers ("Disable prefill CUDA graph because some layers do not apply Standard
    GQA", printed by every 0.5.17 MTP start on the H200)."""
    if not s.piecewise_graph_tokens:
        return 0
    if rules.prefill_capture_cap == "requests_x_context":
        cap = max(requests, 1) * s.context_len
        return max(
            (t for t in piecewise_graph_token_sizes(s.prefill_graph_max_tokens) if t <= cap), default=0
        )
    return s.prefill_graph_max_tokens


def prefill_graph_gib(
    shape: ModelShape,
    s: SglangSettings,
    rules: SglangRelease,
    captured_tokens: int,
    bytes_per_token_hidden_layer: float = BREAKABLE_GRAPH_BYTES_PER_TOKEN_HIDDEN_LAYER,
    moe_bytes_per_token_hidden_layer: float | None = None,
) -> float:
    """Prefill CUDA graphs: a breakable graph keeps activations for its largest captured token
    count in every layer (`bytes_per_token_hidden_layer`; a MoE layer its own, where one is
    known); piecewise graphs get SGLang's own 8 MiB per captured size."""
    if not captured_tokens:
        return 0.0
    if rules.prefill_graph == "breakable":
        per_layer = bytes_per_token_hidden_layer
        if shape.is_moe and moe_bytes_per_token_hidden_layer is not None:
            per_layer = moe_bytes_per_token_hidden_layer
        per_token = per_layer * shape.hidden_size * shape.num_hidden_layers
        return captured_tokens * per_token / s.tp_size / GIB
    return PIECEWISE_GRAPH_MIB * len(piecewise_graph_token_sizes(captured_tokens)) / 1024


def tp_buffers_gib(s: SglangSettings) -> float:
    """NCCL / custom all-reduce buffers: SGLang's tp * pp / 8 GiB allowance."""
    return s.tp_size * s.pp_size / 8 if s.tp_size * s.pp_size > 1 else 0.0


def mamba_cow_requests(s: SglangSettings, requests: int) -> int:
    """State copies one extend batch makes with the radix cache on: every request whose prompt
    hits a cached prefix copies that prefix's state into its own slot, and one prefill batch
    takes up to --prefill-max-requests (else every running request) such requests."""
    if s.radix_cache_disabled:
        return 0
    cap = s.prefill_max_requests if s.prefill_max_requests is not None else requests
    return max(min(cap, requests), 0)


def mamba_cow_transient_gib(shape: ModelShape, s: SglangSettings, requests: int) -> float:
    """The serving-time temporary of those copies: `MambaPool.copy_from` runs
    `temporal[:, dst] = temporal[:, src]`, which gathers every source SSM state at once
    (memory_pool.py, 0.5.17; a real start ran out of memory there: 5.06 GiB for 36 copies of
    144 MiB with 3.46 GiB free). The conv states are copied in place or one layer at a time."""
    gdn = gdn_layer(shape, s.tp_size)
    if gdn is None:
        return 0.0
    ssm_bytes = gdn.ssm_state_bytes(s.tp_size, s.ssm_dtype_bytes) * shape.linear_attention_layers
    return mamba_cow_requests(s, requests) * ssm_bytes / GIB
