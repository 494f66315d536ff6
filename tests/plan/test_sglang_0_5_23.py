"""What SGLang 0.5.23 plans differently: DSPARK planned, UNO refused, and post-capture KV sizing
(SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, off by default) planned both ways: arg_groups/memory_hook.py (the default fraction keeps 1.5 GiB + parallel slack)
and model_runner_components/kv_pool_runtime.py compute_post_capture_kv_resize (the pool is sized
again from what graph capture left, less the headroom)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.models.shape import load_model_shape
from specpilot.plan.effective import effective_args
from specpilot.plan.sglang.planner import plan_sglang
from specpilot.plan.types import Plan
from specpilot.spec import Spec

ROOT = Path(__file__).resolve().parents[2]
ON = {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}


def _plan(
    model: str, args: list[str], env: dict[str, str], version: str = "0.5.23", gib: float = 31.4
) -> Plan:
    spec = Spec.model_validate(
        {
            "name": "post-capture",
            "model": {"path": str(ROOT / "examples" / "models" / model)},
            "gpu": {"memory_gib": gib},
            "engine": {"name": "sglang", "version": version, "args": args, "env": env},
        }
    )
    shape = load_model_shape(spec.model_dir())
    return plan_sglang(spec, shape, effective_args(spec, shape))


def _term(plan: Plan, start: str) -> float:
    return next(t.gib for t in plan.terms if t.name.startswith(start))


def test_the_default_fraction_keeps_only_the_floor_and_parallel_slack() -> None:
    """round((gpu - 1536 - tp * pp / 8 * 1024) / gpu, 3) with the variable; the 10 GiB floor and the
    graph reserve only without it."""
    gpu_mib = 139.8 * 1024
    on = _plan("qwen3-8b", ["--context-length", "32768"], ON, gib=139.8)
    off = _plan("qwen3-8b", ["--context-length", "32768"], {}, gib=139.8)
    assert on.memory_fraction == round((gpu_mib - 1536 - 128) / gpu_mib, 3)
    assert off.memory_fraction <= round((gpu_mib - 10 * 1024) / gpu_mib, 3) < on.memory_fraction


def test_graphs_come_out_of_the_pool_budget_and_the_reserve_keeps_the_headroom() -> None:
    """Dense, decode graphs (24 on this card) covering every running request: the headroom is free x (1 - fraction)
    and everything capture allocated is charged before the KV pool."""
    args = ["--context-length", "32768", "--max-running-requests", "16"]  # within the 24 graphs
    on, off = _plan("qwen3-8b", args, ON), _plan("qwen3-8b", args, {})
    headroom = _term(on, "headroom kept after graph capture")
    free = _term(on, "free before weights load")
    assert headroom == pytest.approx(free * (1 - on.memory_fraction), abs=0.01)
    captured = sum(
        t.gib for t in on.terms if t.name.startswith(("decode CUDA graphs", "prefill CUDA graphs"))
    )
    assert captured > 0
    steady = [t for t in on.terms[3:] if not t.name.startswith("KV cache") and t.note != "peak"]
    kv = _term(on, "KV cache")
    # free = weights + headroom + what capture allocated + KV (to one page of rounding)
    assert free - _term(on, "target weights") - headroom - sum(t.gib for t in steady) == pytest.approx(
        kv, abs=0.01
    )
    assert on.reserve_needed_gib < off.reserve_needed_gib  # only the activation peak is left for it
    assert any("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is on" in n for n in on.notes)
    assert not any("POST_CAPTURE" in n for n in off.notes)


def test_eager_decode_keeps_the_activation_reserve() -> None:
    """More running requests than the decode graphs hold: decode runs eagerly, and the resize keeps
    the pre-capture activation reserve (512 + 1.5 x chunk + parallel slack MiB) back."""
    plan = _plan("qwen3-8b", ["--context-length", "32768", "--max-running-requests", "2048"], ON)
    chunk_mib = 2048  # this card's chunked prefill size
    assert _term(plan, "headroom kept after graph capture") == pytest.approx(
        (512 + 1.5 * chunk_mib + 128) / 1024, abs=0.01
    )


def test_hybrid_models_keep_at_least_ten_gib_on_a_large_card() -> None:
    plan = _plan("qwen3.6-27b", ["--context-length", "32768"], ON, gib=139.8)
    assert _term(plan, "headroom kept after graph capture") >= 10.0
    assert plan.kv_tokens > 0 and plan.state_slots > 0


@pytest.mark.parametrize("version", ["0.5.19", "0.5.22"])
def test_releases_whose_resize_was_not_read_plan_it_as_off_and_say_so(version: str) -> None:
    on = _plan("qwen3-8b", ["--context-length", "32768"], ON, version=version)
    off = _plan("qwen3-8b", ["--context-length", "32768"], {}, version=version)
    assert on.kv_tokens == off.kv_tokens
    assert any("set but planned as off" in n for n in on.notes)


def test_the_variable_off_is_the_default() -> None:
    explicit_off = _plan(
        "qwen3-8b", ["--context-length", "32768"], {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "0"}
    )
    default = _plan("qwen3-8b", ["--context-length", "32768"], {})
    assert explicit_off.kv_tokens == default.kv_tokens
    assert explicit_off.memory_fraction == default.memory_fraction


def test_dspark_is_planned_with_its_drafter_named_unread() -> None:
    plan = _plan(
        "qwen3-8b",
        [
            "--context-length",
            "32768",
            "--speculative-algorithm",
            "DSPARK",
            "--speculative-draft-model-path",
            "/d",
        ],
        {},
    )
    assert plan.kv_tokens > 0 and plan.max_running_requests <= 48  # _handle_dspark's default
    assert any("DSPARK's drafter is its own checkpoint" in n for n in plan.notes)


def test_uno_is_refused_with_the_reason() -> None:
    from specpilot.errors import UserError

    args = [
        "--speculative-algorithm", "UNO", "--uno-lora-path", "/a", "--speculative-num-draft-tokens", "4",
        "--attention-backend", "fa3",
    ]  # fmt: skip
    with pytest.raises(UserError) as refused:
        _plan("qwen3-8b", args, {})
    assert refused.value.field == "--speculative-algorithm"
    assert "LoRA adapter" in str(refused.value)
