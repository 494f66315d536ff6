"""Each layer spec with a worked number. The shapes are the examples' Qwen3.6-27B (16 full-attention
layers with 4 KV heads of 256, 48 Gated-DeltaNet layers with 16 key and 48 value heads of 128,
conv kernel 4, one MTP layer), Qwen3-8B (dense, 8 KV heads of 128) and Qwen3-30B-A3B (128
experts, 8 per token, 768 wide)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specpilot.models.layers import (
    FullAttentionSpec,
    GatedDeltaNetSpec,
    MLAAttentionSpec,
    MoeSpec,
    MtpSpec,
    SlidingWindowSpec,
    layer_specs,
)
from specpilot.models.shape import SLIDING_ATTENTION, ModelShape, load_model_shape

MODELS = Path(__file__).resolve().parents[2] / "examples/models"


@pytest.fixture(scope="module")
def qwen36() -> ModelShape:
    return load_model_shape(MODELS / "qwen3.6-27b")


@pytest.fixture(scope="module")
def qwen3_8b() -> ModelShape:
    return load_model_shape(MODELS / "qwen3-8b")


def test_full_attention_kv_bytes_per_token(qwen36: ModelShape) -> None:
    attention = layer_specs(qwen36).full_attention
    assert attention == FullAttentionSpec(num_kv_heads=4, head_dim=256)
    # K + V: 2 x 4 heads x 256 x 2 bytes (bf16) = 4096
    assert attention.kv_bytes_per_token(1, 2) == 4096
    # TP 2 at fp8: 2 x 2 heads x 256 x 1 = 1024
    assert attention.kv_bytes_per_token(2, 1) == 1024
    # TP 8 splits 4 heads below one per GPU: each GPU keeps one, 2 x 1 x 256 x 2 = 1024
    assert attention.kv_heads_per_gpu(8) == 1
    assert attention.kv_bytes_per_token(8, 2) == 1024
    assert qwen36.kv_cache_layers == 16


def test_sliding_window_costs_what_full_attention_costs_per_token(qwen3_8b: ModelShape) -> None:
    kinds = qwen3_8b.layer_kinds[:28] + (SLIDING_ATTENTION,) * 8
    windowed = replace(qwen3_8b, layer_kinds=kinds, sliding_window=4096)
    sliding = layer_specs(windowed).sliding_window
    assert sliding == SlidingWindowSpec(num_kv_heads=8, head_dim=128, sliding_window_tokens=4096)
    # 2 x 8 heads x 128 x 2 bytes = 4096, as in a full-attention layer of the same heads
    assert (
        sliding.kv_bytes_per_token(1, 2)
        == 4096
        == layer_specs(windowed).full_attention.kv_bytes_per_token(1, 2)
    )
    # and both planners count the sliding layers in full: 28 + 8
    assert windowed.kv_cache_layers == 36
    assert layer_specs(qwen3_8b).sliding_window is None


def test_mla_keeps_one_latent_on_every_gpu(qwen3_8b: ModelShape) -> None:
    # DeepSeek-V3's latent: kv_lora_rank 512 + rope 64 = 576 x 2 bytes (bf16) = 1152, at any TP
    deepseek_like = replace(qwen3_8b, kv_lora_rank=512, qk_rope_head_dim=64)
    mla = layer_specs(deepseek_like).mla
    assert mla == MLAAttentionSpec(kv_lora_rank=512, qk_rope_head_dim=64)
    assert mla.kv_bytes_per_token(1, 2) == mla.kv_bytes_per_token(8, 2) == 1152
    assert layer_specs(qwen3_8b).mla is None


def test_gated_deltanet_conv_and_ssm_state_bytes(qwen36: ModelShape, qwen3_8b: ModelShape) -> None:
    gdn = layer_specs(qwen36).gated_delta_net
    assert gdn == GatedDeltaNetSpec(16, 48, 128, 128, 4)
    # conv channels: 2 x 16 x 128 (q, k) + 48 x 128 (v) = 10240
    assert gdn.conv_channels == 10240
    # conv window: 10240 x (4 - 1) positions x 2 bytes (bf16) = 61440
    assert gdn.conv_state_bytes(1, 2) == 61440
    # three extra (speculative) positions: 10240 x 6 x 2 = 122880; TP 2: 5120 x 3 x 2 = 30720
    assert gdn.conv_state_bytes(1, 2, extra_positions=3) == 122880
    assert gdn.conv_state_bytes(2, 2) == 30720
    # SSM state: 48 heads x 128 x 128 x 4 bytes (float32) = 3,145,728; TP 2 holds 24 heads
    assert gdn.ssm_state_bytes(1, 4) == 3_145_728
    assert gdn.ssm_state_bytes(2, 4) == 1_572_864
    # one request's state per layer, as vLLM printed it (test_vllm_memory.py): 3,207,168
    assert gdn.conv_state_bytes(1, 2) + gdn.ssm_state_bytes(1, 4) == 3_207_168
    assert layer_specs(qwen3_8b).gated_delta_net is None


def test_mtp_head_weights_bytes(qwen36: ModelShape) -> None:
    mtp = layer_specs(qwen36).mtp
    # one layer: attention 5120 x (24 x 256 x 2 + 2 x 4 x 256) + 24 x 256 x 5120 = 104,857,600,
    # MLP 3 x 5120 x 17408 = 267,386,880, projection 2 x 5120 x 5120 = 52,428,800: 424,673,280
    assert mtp == MtpSpec(num_layers=1, param_count=424_673_280)
    # bf16 on TP 2: 424,673,280 x 2 bytes / 2
    assert mtp.weights_bytes(2, 2) == 424_673_280


def test_moe_gate_up_width() -> None:
    moe = layer_specs(load_model_shape(MODELS / "qwen3-30b-a3b")).moe
    assert moe == MoeSpec(num_experts=128, experts_per_token=8, expert_intermediate_size=768)
    # gate + up of 8 experts of 768: 2 x 8 x 768 = 12288 elements per token
    assert moe.gate_up_width(moe.experts_per_token) == 12288
