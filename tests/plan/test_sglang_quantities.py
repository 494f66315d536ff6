"""Each SGLang memory quantity on its own, with numbers worked by hand from the engine's
formulas (Qwen3.6-27B: 16 full-attention layers with 4 KV heads of 256, 48 Gated-DeltaNet
layers with 16 key heads / 48 value heads of 128 and a 4-wide conv)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specpilot.engines.sglang.releases import release_rules
from specpilot.errors import UserError
from specpilot.models.shape import ModelShape, load_model_shape
from specpilot.plan import sglang_quantities as q
from specpilot.plan.effective import evaluate
from specpilot.plan.sglang_settings import (
    SglangSettings,
    default_mem_fraction_static,
    resolve_settings,
)
from specpilot.plan.types import GIB

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hybrid() -> ModelShape:
    return load_model_shape(ROOT / "examples/models/qwen3.6-27b")


@pytest.fixture(scope="module")
def dense() -> ModelShape:
    return load_model_shape(ROOT / "examples/models/qwen3-14b")


def settings(
    shape: ModelShape,
    argv: list[str],
    version: str = "0.5.13",
    env: dict[str, str] | None = None,
    gpu_gib: float = 95.6,
) -> SglangSettings:
    args = evaluate("sglang", version, argv, env or {}, shape, gpu_gib)
    return resolve_settings(
        args,
        shape,
        gpu_memory_gib=gpu_gib,
        weights_dtype="bfloat16",
        quantization=None,
        rules=release_rules(version),
    )


def test_kv_bytes_per_token_counts_full_attention_layers_only(hybrid: ModelShape) -> None:
    s = settings(hybrid, [])
    # 4 heads x 256 x (K+V) x 2 bytes x 16 layers
    assert q.kv_bytes_per_token(hybrid, s) == 4 * 256 * 2 * 2 * 16 == 65536


def test_kv_bytes_per_token_divides_heads_over_tp_and_follows_kv_dtype(dense: ModelShape) -> None:
    s = settings(dense, ["--tp", "4", "--kv-cache-dtype", "fp8_e4m3"])
    assert q.kv_bytes_per_token(dense, s) == 2 * 128 * 2 * 1 * 40


def test_kv_heads_are_replicated_when_tp_exceeds_them(hybrid: ModelShape) -> None:
    assert q.kv_heads_per_gpu(hybrid, 8) == 1


def test_state_bytes_per_request_is_conv_plus_ssm_over_linear_layers(hybrid: ModelShape) -> None:
    s = settings(hybrid, [])
    conv = (48 * 128 + 2 * 16 * 128) * 3 * 2  # channels x (kernel - 1) x bf16
    ssm = 48 * 128 * 128 * 4  # value heads x v_dim x k_dim x fp32
    assert q.conv_state_bytes_per_layer(hybrid, s) == conv
    assert q.ssm_state_bytes_per_layer(hybrid, s) == ssm
    assert q.state_bytes_per_request(hybrid, s) == (conv + ssm) * 48 == 153944064


def test_state_bytes_halve_with_tp2_and_bf16_ssm(hybrid: ModelShape) -> None:
    fp32 = q.state_bytes_per_request(hybrid, settings(hybrid, ["--tp", "2"]))
    bf16 = q.state_bytes_per_request(
        hybrid, settings(hybrid, ["--tp", "2"], env={"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"})
    )
    assert fp32 == 153944064 // 2
    assert bf16 < fp32 * 0.52


@pytest.mark.parametrize(
    ("argv", "env", "version", "slots"),
    [
        (["--disable-radix-cache"], {}, "0.5.13", 1),
        ([], {}, "0.5.13", 3),  # auto -> no_buffer before 0.5.14
        ([], {}, "0.5.14", 5),  # auto -> extra_buffer with overlap from 0.5.14
        (
            ["--mamba-scheduler-strategy", "extra_buffer", "--disable-overlap-schedule"],
            {},
            "0.5.13",
            4,
        ),
        (
            ["--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"],
            {"SGLANG_ENABLE_SPEC_V2": "1"},
            "0.5.13",
            5,
        ),
        (
            ["--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"],
            {"SGLANG_ENABLE_SPEC_V2": "0"},
            "0.5.13",
            4,
        ),
        (
            ["--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"],
            {},
            "0.5.10",
            4,
        ),  # spec v2 (overlap) is off by default in 0.5.10
    ],
)
def test_state_slots_per_request_follow_strategy_and_overlap(
    hybrid: ModelShape, argv: list[str], env: dict[str, str], version: str, slots: int
) -> None:
    assert q.state_slots_per_request(settings(hybrid, argv, version, env)) == slots


def test_speculative_defaults(hybrid: ModelShape) -> None:
    s = settings(hybrid, ["--speculative-algorithm", "nextn"])
    # NEXTN is SGLang's alias of EAGLE
    assert (s.speculative_algorithm, s.num_draft_tokens, s.max_running_requests) == ("EAGLE", 4, 48)
    s = settings(
        hybrid,
        [
            "--speculative-algorithm",
            "NEXTN",
            "--speculative-num-steps",
            "5",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "3",
        ],
    )
    assert s.num_draft_tokens == 6  # topk 1 forces steps + 1


def test_mtp_is_not_an_sglang_algorithm(hybrid: ModelShape) -> None:
    with pytest.raises(UserError, match="NEXTN"):
        settings(hybrid, ["--speculative-algorithm", "MTP"])


def test_default_mem_fraction_static_on_an_h200(dense: ModelShape) -> None:
    # 141 GiB: chunk 8192, graph bs 256, 58 piecewise sizes up to 8192:
    # 512 + 12288 + 512 + 128 + 464 = 13904 MiB reserved
    gpu_mib = 141 * 1024
    fraction = default_mem_fraction_static(
        gpu_memory_mib=gpu_mib,
        chunked_prefill_size=8192,
        cuda_graph_max_bs=256,
        piecewise_graph_tokens=58,
        tp_size=1,
        pp_size=1,
        speculative_algorithm=None,
        rules=release_rules("0.5.13"),
        shape=dense,
        language_only=False,
    )
    assert fraction == round((gpu_mib - 13904) / gpu_mib, 3)
    s = settings(dense, [], gpu_gib=141)
    assert s.piecewise_graph_tokens == 58
    assert s.mem_fraction_static == fraction


def test_default_mem_fraction_reserves_draft_room_only_before_0_5_14(hybrid: ModelShape) -> None:
    spec = ["--speculative-algorithm", "NEXTN"]
    old = settings(hybrid, spec, "0.5.13").mem_fraction_static
    new = settings(hybrid, spec, "0.5.14").mem_fraction_static
    plain = settings(hybrid, [], "0.5.13").mem_fraction_static
    assert new == pytest.approx(plain)
    assert old < new  # 4 GiB more reserved, then the same vision-tower scaling


def test_state_pool_ratio_split_without_speculation(hybrid: ModelShape) -> None:
    s = settings(hybrid, [])
    per_req = 153944064
    pool = q.state_pool(hybrid, s, release_rules("0.5.13"), 38.0)
    assert pool.slots == int(38.0 * GIB * 0.9 / 1.9 // per_req)
    assert pool.intermediate_gib == 0
    assert pool.rest_for_kv_gib == pytest.approx(38.0 - pool.slots * per_req / GIB)


def test_state_pool_joint_solve_with_speculation(hybrid: ModelShape) -> None:
    s = settings(
        hybrid,
        ["--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"],
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    )
    per_req, draft, ratio = 153944064, 4, 5
    pool = q.state_pool(hybrid, s, release_rules("0.5.13"), 36.0)
    budget = 36.0 * GIB * 0.9 / 1.9
    assert pool.slots == int(budget // (per_req * (1 + draft / ratio)))
    assert pool.intermediate_gib * GIB == per_req * min(48, pool.slots // ratio) * draft


def test_state_pool_pays_the_padding_slot_from_0_5_17(hybrid: ModelShape) -> None:
    s = settings(hybrid, [], "0.5.17")
    per_req = 153944064
    pool = q.state_pool(hybrid, s, release_rules("0.5.17"), 38.0)
    assert pool.slots == int((38.0 * GIB * 0.9 / 1.9 - per_req) // per_req)
    assert pool.state_gib * GIB == (pool.slots + 1) * per_req


def test_intermediate_state_reserved_first_before_0_5_13(hybrid: ModelShape) -> None:
    argv = ["--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"]
    old = q.state_pool(hybrid, settings(hybrid, argv, "0.5.12"), release_rules("0.5.12"), 36.0)
    # the whole default of 48 requests x 4 draft tokens is charged before the split
    assert old.intermediate_gib * GIB == 153944064 * 48 * 4


def test_explicit_max_mamba_cache_size_is_used_as_given(hybrid: ModelShape) -> None:
    s = settings(hybrid, ["--max-mamba-cache-size", "24"])
    pool = q.state_pool(hybrid, s, release_rules("0.5.13"), 36.0)
    assert pool.slots == 24


def test_kv_tokens_round_down_to_the_page(hybrid: ModelShape) -> None:
    s = settings(hybrid, ["--page-size", "64"])
    tokens = q.kv_tokens(10.0, 65536, s)
    assert tokens % 64 == 0
    assert tokens == (10 * GIB // 65536) // 64 * 64


def test_max_running_requests_rules(dense: ModelShape, hybrid: ModelShape) -> None:
    old, new = release_rules("0.5.13"), release_rules("0.5.14")
    s = settings(dense, [])  # context 40960
    assert q.max_running_requests(298447, 0, s, new, False) == 3730  # the pool estimate
    assert q.max_running_requests(1000, 0, s, new, False) == 500  # tokens // 2
    capped = replace(s, max_running_requests=5000)
    assert q.max_running_requests(298447, 0, capped, old, False) == 3730
    assert q.max_running_requests(298447, 0, capped, new, False) == 5000
    h = settings(
        hybrid,
        ["--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"],
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    )
    assert q.max_running_requests(300000, 66, h, old, True) == 13  # 66 slots // 5


def test_draft_kv_folds_into_the_cell_from_0_5_14(hybrid: ModelShape) -> None:
    argv = ["--speculative-algorithm", "NEXTN"]
    assert q.pool_cell_bytes(hybrid, settings(hybrid, argv, "0.5.13"), release_rules("0.5.13")) == 65536
    new = settings(hybrid, argv, "0.5.14")
    assert q.pool_cell_bytes(hybrid, new, release_rules("0.5.14")) == int(65536 * (1 + 1 / 16))


def test_target_weights_exclude_the_mtp_head(hybrid: ModelShape) -> None:
    s = settings(hybrid, [])
    expected = (hybrid.param_count - hybrid.mtp_param_count) * 2 / GIB
    assert q.target_weights_gib(hybrid, s) == pytest.approx(expected)
    assert 50 < expected < 52  # the incident's "about 51 GB"


def test_releases_outside_the_range_are_refused() -> None:
    with pytest.raises(UserError, match=r"0\.5\.10"):
        release_rules("0.4.9")
    assert release_rules("0.5.13.post1").intermediate_rule == "joint"
    assert release_rules("0.5.23").strategy_flag == "--mamba-radix-cache-strategy"
