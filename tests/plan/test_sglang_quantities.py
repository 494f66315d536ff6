"""Each SGLang memory quantity on its own: how it moves with the flags and the release
(Qwen3.6-27B: 16 full-attention layers with 4 KV heads of 256, 48 Gated-DeltaNet layers).
The sizes themselves are checked against what real starts printed (K/V, conv and SSM
buffers, weights, default fractions: test_sglang_h200.py); the plan-wide properties are in
test_plan_properties.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specpilot.engines.registry import engine_release
from specpilot.engines.sglang.releases import release_rules
from specpilot.errors import UserError
from specpilot.models.layers import layer_specs
from specpilot.models.shape import ModelShape, load_model_shape
from specpilot.plan.effective import evaluate
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.settings import (
    SglangSettings,
    default_mem_fraction_static,
    piecewise_graph_token_sizes,
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
    args = evaluate(engine_release("sglang", version), argv, env or {}, shape, gpu_gib)
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
    per_layer = layer_specs(hybrid).full_attention.kv_bytes_per_token(s.tp_size, s.kv_dtype_bytes)
    assert hybrid.full_attention_layers < hybrid.num_hidden_layers
    assert q.kv_bytes_per_token(hybrid, s) == per_layer * hybrid.full_attention_layers


def test_kv_bytes_per_token_divides_heads_over_tp_and_follows_kv_dtype(dense: ModelShape) -> None:
    bf16_tp1 = q.kv_bytes_per_token(dense, settings(dense, []))
    fp8_tp4 = q.kv_bytes_per_token(dense, settings(dense, ["--tp", "4", "--kv-cache-dtype", "fp8_e4m3"]))
    assert fp8_tp4 * 8 == bf16_tp1  # a quarter of the heads per GPU at half the bytes


def test_state_bytes_per_request_is_conv_plus_ssm_over_linear_layers(hybrid: ModelShape) -> None:
    s = settings(hybrid, [])
    gdn = q.gdn_layer(hybrid, s.tp_size)
    assert gdn is not None
    per_layer = gdn.conv_state_bytes(s.tp_size, s.conv_dtype_bytes) + gdn.ssm_state_bytes(
        s.tp_size, s.ssm_dtype_bytes
    )
    assert q.state_bytes_per_request(hybrid, s) == per_layer * hybrid.linear_attention_layers


def test_sglang_pads_key_head_groups_that_tp_does_not_divide(hybrid: ModelShape) -> None:
    # 16 key heads: TP 2 divides them, TP 32 does not and SGLang pads them to 32 (vLLM does not)
    assert q.gdn_layer(hybrid, 2) == layer_specs(hybrid).gated_delta_net
    padded = q.gdn_layer(hybrid, 32)
    assert padded is not None and padded.num_key_heads == 32


def test_no_state_without_linear_attention_layers(dense: ModelShape) -> None:
    assert q.gdn_layer(dense, 1) is None
    assert q.state_bytes_per_request(dense, settings(dense, [])) == 0


def test_state_bytes_halve_with_tp2_and_bf16_ssm(hybrid: ModelShape) -> None:
    tp1 = q.state_bytes_per_request(hybrid, settings(hybrid, []))
    fp32 = q.state_bytes_per_request(hybrid, settings(hybrid, ["--tp", "2"]))
    bf16 = q.state_bytes_per_request(
        hybrid, settings(hybrid, ["--tp", "2"], env={"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"})
    )
    assert fp32 == tp1 // 2
    assert bf16 < fp32 * 0.52  # the SSM state is nearly all of it


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


def test_default_mem_fraction_static_follows_the_piecewise_graph_allowance(dense: ModelShape) -> None:
    """The default fraction is the one the function gives for the settings' own sizes, and
    every captured prefill graph size reserves more (8 MiB each)."""
    s = settings(dense, [], gpu_gib=141)
    assert s.piecewise_graph_tokens == len(piecewise_graph_token_sizes(s.chunked_prefill_size))

    def fraction(piecewise_graph_tokens: int) -> float:
        return default_mem_fraction_static(
            gpu_memory_mib=s.gpu_memory_mib,
            chunked_prefill_size=s.chunked_prefill_size,
            cuda_graph_max_bs=s.cuda_graph_max_bs,
            piecewise_graph_tokens=piecewise_graph_tokens,
            tp_size=1,
            pp_size=1,
            speculative_algorithm=None,
            rules=release_rules("0.5.13"),
            shape=dense,
            language_only=False,
        )

    assert s.mem_fraction_static == fraction(s.piecewise_graph_tokens)
    assert fraction(0) > fraction(s.piecewise_graph_tokens)


def test_default_mem_fraction_reserves_draft_room_only_before_0_5_14(hybrid: ModelShape) -> None:
    spec = ["--speculative-algorithm", "NEXTN"]
    old = settings(hybrid, spec, "0.5.13").mem_fraction_static
    new = settings(hybrid, spec, "0.5.14").mem_fraction_static
    plain = settings(hybrid, [], "0.5.13").mem_fraction_static
    assert new == pytest.approx(plain)
    assert old < new  # 4 GiB more reserved, then the same vision-tower scaling


def _pool_total_gib(pool: q.StatePool) -> float:
    return pool.state_gib + pool.intermediate_gib + pool.rest_for_kv_gib


def test_state_pool_ratio_split_without_speculation(hybrid: ModelShape) -> None:
    """The state takes rest x r / (1 + r) (r = mamba_full_memory_ratio, 0.9) in whole slots:
    at most that share, less than one slot short of it; the KV pool gets the remainder."""
    s = settings(hybrid, [])
    slot_gib = q.state_bytes_per_request(hybrid, s) / GIB
    pool = q.state_pool(hybrid, s, release_rules("0.5.13"), 38.0)
    share_gib = 38.0 * 0.9 / 1.9
    assert pool.state_gib <= share_gib < pool.state_gib + slot_gib
    assert pool.intermediate_gib == 0
    assert _pool_total_gib(pool) == pytest.approx(38.0)


def test_state_pool_joint_solve_with_speculation(hybrid: ModelShape) -> None:
    """With speculation the slots and their running requests' intermediate states share the
    same state budget: fewer slots than without, and the split still adds up."""
    argv = ["--mamba-scheduler-strategy", "extra_buffer"]
    env = {"SGLANG_ENABLE_SPEC_V2": "1"}
    plain = settings(hybrid, argv, env=env)
    speculative = settings(hybrid, ["--speculative-algorithm", "NEXTN", *argv], env=env)
    rules = release_rules("0.5.13")
    with_draft = q.state_pool(hybrid, speculative, rules, 36.0)
    without = q.state_pool(hybrid, plain, rules, 36.0)
    assert 0 < with_draft.slots < without.slots
    assert with_draft.intermediate_gib > 0
    assert with_draft.state_gib + with_draft.intermediate_gib <= 36.0 * 0.9 / 1.9
    assert _pool_total_gib(with_draft) == pytest.approx(36.0)


def test_state_pool_pays_the_padding_slot_from_0_5_17(hybrid: ModelShape) -> None:
    """0.5.17 counts the pool's padding slot in the split: one slot fewer for the same
    memory (the buffers hold count + 1 slots in every release, as the logs print)."""
    before = q.state_pool(hybrid, settings(hybrid, [], "0.5.13"), release_rules("0.5.13"), 38.0)
    padded = q.state_pool(hybrid, settings(hybrid, [], "0.5.17"), release_rules("0.5.17"), 38.0)
    assert padded.slots == before.slots - 1
    assert padded.state_gib == before.state_gib


def test_intermediate_state_reserved_first_before_0_5_13(hybrid: ModelShape) -> None:
    """Up to 0.5.12 the intermediate state of the default running requests is charged before
    the split, whatever the memory; from 0.5.13 it follows the slots the memory allows."""
    argv = ["--speculative-algorithm", "NEXTN", "--mamba-scheduler-strategy", "extra_buffer"]
    old_settings, new_settings = settings(hybrid, argv, "0.5.12"), settings(hybrid, argv, "0.5.13")
    old_rules, new_rules = release_rules("0.5.12"), release_rules("0.5.13")
    old = [q.state_pool(hybrid, old_settings, old_rules, rest).intermediate_gib for rest in (20.0, 36.0)]
    new = [q.state_pool(hybrid, new_settings, new_rules, rest).intermediate_gib for rest in (20.0, 36.0)]
    assert old[0] == old[1] > 0
    assert 0 < new[0] < new[1]


def test_explicit_max_mamba_cache_size_is_used_as_given(hybrid: ModelShape) -> None:
    s = settings(hybrid, ["--max-mamba-cache-size", "24"])
    pool = q.state_pool(hybrid, s, release_rules("0.5.13"), 36.0)
    assert pool.slots == 24


def test_kv_tokens_round_down_to_the_page(hybrid: ModelShape) -> None:
    s = settings(hybrid, ["--page-size", "64"])
    tokens = q.kv_tokens(10.0, 65536, s)
    assert tokens % 64 == 0
    assert tokens * 65536 <= 10 * GIB < (tokens + 64) * 65536  # whole pages, less than one left


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
    target, draft = q.kv_bytes_per_token(hybrid, new), q.draft_kv_bytes_per_token(hybrid, new)
    assert draft > 0
    assert q.pool_cell_bytes(hybrid, new, release_rules("0.5.14")) == target + draft


def test_target_weights_exclude_the_mtp_head(hybrid: ModelShape) -> None:
    """The MTP head loads with the draft; the H200 logs' "mem usage" checks the size."""
    s = settings(hybrid, [])
    with_head = replace(hybrid, mtp_param_count=0)
    assert hybrid.mtp_param_count > 0
    head_gib = hybrid.mtp_param_count * s.weights_dtype_bytes / GIB
    assert q.target_weights_gib(with_head, s) - q.target_weights_gib(hybrid, s) == pytest.approx(head_gib)


def test_releases_outside_the_range_are_refused() -> None:
    with pytest.raises(UserError, match=r"0\.5\.10"):
        release_rules("0.4.9")
    assert release_rules("0.5.13.post1").intermediate_rule == "joint"
    assert release_rules("0.5.23").strategy_flag == "--mamba-radix-cache-strategy"


@pytest.mark.parametrize(
    ("context", "argv", "regrows"),
    [
        (262144, [], True),  # the model's own positions: the engine asks for 262,144 + 256
        (32768, [], False),
        (262144 - 256, [], False),  # 262,144 wanted, 262,143 < 262,144 rows: no regrowth
        (262144 - 255, [], True),
        # the speculative room (2 x 3 steps x 4 draft tokens) tips a context 270 below over
        (262144 - 270, ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"], True),
        (262144 - 270, [], False),
    ],
)
def test_the_rope_cache_regrows_only_where_the_context_reaches_its_positions(
    hybrid: ModelShape, context: int, argv: list[str], regrows: bool
) -> None:
    speculative = ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"] if argv else []
    s = settings(hybrid, [*argv, *speculative, "--context-length", str(context)], version="0.5.17")
    cache_gib = hybrid.max_position_embeddings * hybrid.rotary_dim * 4 / GIB
    assert hybrid.rotary_dim == 64  # 256 x partial_rotary_factor 0.25
    expected = release_rules("0.5.17").rope_regrowth_share * cache_gib if regrows else 0.0
    assert q.rope_regrowth_gib(hybrid, s, release_rules("0.5.17")) == pytest.approx(expected)


def test_rope_regrowth_is_unplanned_where_the_release_was_not_measured(hybrid: ModelShape) -> None:
    s = settings(hybrid, [], version="0.5.16")
    assert s.context_len == hybrid.max_position_embeddings
    assert q.rope_regrowth_gib(hybrid, s, release_rules("0.5.16")) == 0.0
    assert q.rope_regrowth_gib(hybrid, s, release_rules("0.5.17")) > 0.0
