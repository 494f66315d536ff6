"""Typed layer specs: what one layer of each kind keeps, in bytes, at a TP degree and dtype.

After vLLM's `v1/kv_cache_interface.py` (FullAttentionSpec, SlidingWindowSpec,
MLAAttentionSpec, MambaSpec): one small frozen spec per layer kind, its sizes as named
methods. Both planners size their pools from these; what an engine does differently (which
dtype a state uses, SGLang padding key heads to TP, vLLM's speculative conv columns) stays in
that engine's planner and reaches a spec as an argument.

Attention kinds answer bytes per token, state kinds bytes per request; all sizes are per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpilot.models.shape import ModelShape


@dataclass(frozen=True)
class FullAttentionSpec:
    """One full-attention layer: K and V of every token of the context."""

    num_kv_heads: int
    head_dim: int

    def kv_heads_per_gpu(self, tp_size: int) -> int:
        """KV heads split over TP ranks, replicated below one per rank (SGLang and vLLM
        alike: `get_num_kv_heads`)."""
        return max(1, self.num_kv_heads // tp_size)

    def kv_bytes_per_token(self, tp_size: int, dtype_bytes: float) -> int:
        """K + V of one token: 2 x kv heads per GPU x head_dim x dtype bytes
        (vLLM `AttentionSpec.real_page_size_bytes` at block_size 1)."""
        return int(2 * self.kv_heads_per_gpu(tp_size) * self.head_dim * dtype_bytes)


@dataclass(frozen=True)
class SlidingWindowSpec(FullAttentionSpec):
    """A sliding-window attention layer: a token costs what it costs in full attention; only
    the last `sliding_window_tokens` need to stay. Both planners keep every token (safe side)."""

    sliding_window_tokens: int


@dataclass(frozen=True)
class MLAAttentionSpec:
    """A multi-head latent attention layer (DeepSeek style): one compressed latent per token."""

    kv_lora_rank: int
    qk_rope_head_dim: int

    def kv_bytes_per_token(self, tp_size: int, dtype_bytes: float) -> int:
        """(kv_lora_rank + qk_rope_head_dim) x dtype bytes; one latent head with no separate V,
        the same on every TP rank (vLLM `MLAAttentionSpec.real_page_size_bytes`, block_size 1),
        so `tp_size` does not change it."""
        del tp_size
        return int((self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes)


#: what a KV-cache layer keeps per token, whichever attention it is
AttentionSpec = FullAttentionSpec | MLAAttentionSpec


@dataclass(frozen=True)
class GatedDeltaNetSpec:
    """A Gated-DeltaNet (linear-attention / mamba) layer: a fixed conv + SSM state per request."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel_size: int

    @property
    def conv_channels(self) -> int:
        """Channels the causal conv runs over: q and k (2 x key heads x key dim) and v."""
        return 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim

    def conv_state_bytes(self, tp_size: int, dtype_bytes: float, extra_positions: int = 0) -> int:
        """The conv window of one request: channels / TP x (kernel - 1 + `extra_positions`)
        positions x dtype bytes (vLLM mamba_utils.py:gated_delta_net_state_shape; vLLM passes
        its speculative tokens as extra positions)."""
        positions = self.conv_kernel_size - 1 + extra_positions
        return int(self.conv_channels // tp_size * positions * dtype_bytes)

    def ssm_state_bytes(self, tp_size: int, dtype_bytes: float) -> int:
        """The recurrent (temporal) state of one request: value heads / TP x value dim x key dim
        x dtype bytes."""
        return int(self.num_value_heads // tp_size * self.value_head_dim * self.key_head_dim * dtype_bytes)


@dataclass(frozen=True)
class MtpSpec:
    """The checkpoint's multi-token-prediction head (0 layers when it has none): decoder layer(s)
    with full attention plus a projection, drafting for speculative decoding."""

    num_layers: int
    param_count: int

    def weights_bytes(self, tp_size: int, dtype_bytes: float) -> float:
        """Its own weights per GPU; the embedding and LM head it shares with the target are not
        counted."""
        return self.param_count * dtype_bytes / tp_size


@dataclass(frozen=True)
class MoeSpec:
    """The routed experts of a mixture-of-experts MLP."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int

    def gate_up_width(self, experts: int) -> int:
        """Gate + up projection outputs of one token routed to `experts` experts (elements,
        before TP): the widest activation row of a MoE layer."""
        return 2 * experts * self.expert_intermediate_size


@dataclass(frozen=True)
class LayerSpecs:
    """One spec per layer kind a model has (None for a kind it lacks); the layer counts are the
    shape's (`ModelShape.full_attention_layers` and neighbours)."""

    full_attention: FullAttentionSpec
    sliding_window: SlidingWindowSpec | None
    mla: MLAAttentionSpec | None
    gated_delta_net: GatedDeltaNetSpec | None
    mtp: MtpSpec
    moe: MoeSpec


def layer_specs(shape: ModelShape) -> LayerSpecs:
    """The layer specs of a model shape."""
    full = FullAttentionSpec(num_kv_heads=shape.num_key_value_heads, head_dim=shape.head_dim)
    sliding = None
    if shape.sliding_attention_layers:
        sliding = SlidingWindowSpec(full.num_kv_heads, full.head_dim, int(shape.sliding_window or 0))
    mla = MLAAttentionSpec(shape.kv_lora_rank, shape.qk_rope_head_dim) if shape.kv_lora_rank else None
    gdn = None
    if shape.is_hybrid:
        gdn = GatedDeltaNetSpec(
            num_key_heads=shape.linear_num_key_heads,
            num_value_heads=shape.linear_num_value_heads,
            key_head_dim=shape.linear_key_head_dim,
            value_head_dim=shape.linear_value_head_dim,
            conv_kernel_size=shape.linear_conv_kernel_dim,
        )
    return LayerSpecs(
        full_attention=full,
        sliding_window=sliding,
        mla=mla,
        gated_delta_net=gdn,
        mtp=MtpSpec(num_layers=shape.mtp_num_layers, param_count=shape.mtp_param_count),
        # the config's MoE numbers as they are: a dense model's are 0
        moe=MoeSpec(shape.num_experts, shape.num_experts_per_tok, shape.moe_intermediate_size),
    )
