"""SGLang's prefill capture as each release decides it, and the plan held to 11 starts of
SGLang 0.5.17 on the H200 that no fit had seen (the Qwen3.6-27B and Qwen3-8B shapes of
gpu/models/, random weights; the knobs each start ran with, from the report that recorded them).

- 0.5.17 captures prefill graphs up to the chunk at any context (`max_capture_requests x
  context_length`, cuda_graph_setup.py): two recommendations at context 4,096 ran out of memory
  in that capture; their knobs must plan as not fitting, and the plan must recommend others.
- A start that recommended knobs whose own plan said "does not fit" (Qwen3-8B, 47.6 GiB, 0.94
  with 2,616 requests: fp32 logits counted for every pinned request) reached ready.
- The whole card at context 4,096 started with about 0.1 GiB at its low point.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.engines.sglang.releases import release_rules
from specpilot.launch.replan import replan
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.log import prefill_capture_oom
from specpilot.plan.sglang.planner import capture_oom_fix, gate_note, planner_settings, size
from specpilot.plan.types import Plan, SglangDetails
from specpilot.spec import Spec

REPO = Path(__file__).resolve().parents[2]
#: the 0.5.17 row's fit to the H200 starts, and the margin it keeps outside their range
FIT_0517 = release_rules("0.5.17").post_pool_fit
assert FIT_0517 is not None
EXTRAPOLATION_MARGIN_GIB = FIT_0517.extrapolation_margin_gib
#: the flags every start of the round ran with (gpu/sglang/job.py)
RUN_FLAGS = ("--load-format", "dummy", "--attention-backend", "triton", "--sampling-backend", "pytorch")
HYBRID = "qwen3.6-27b-text"
DENSE = "qwen3-8b"


def _spec(model: str, card_gib: float, context: int, *knobs: str, version: str = "0.5.17") -> Spec:
    return Spec.model_validate(
        {
            "name": "held-out",
            "model": {"path": str(REPO / "gpu" / "models" / model)},
            "gpu": {"memory_gib": card_gib},
            "engine": {
                "name": "sglang",
                "version": version,
                "args": [*RUN_FLAGS, "--context-length", str(context), *knobs],
            },
        }
    )


def _margin(plan: Plan) -> float:
    assert isinstance(plan.details, SglangDetails)
    return plan.details.margin_gib


def _knobs(fraction: str, slots: int, requests: int) -> tuple[str, ...]:
    return (
        "--mem-fraction-static",
        fraction,
        "--max-mamba-cache-size",
        str(slots),
        "--max-running-requests",
        str(requests),
    )


@pytest.mark.parametrize(
    ("card_gib", "knobs"), [(79.6, _knobs("0.94", 115, 23)), (95.6, _knobs("0.95", 200, 40))]
)
def test_the_context_4096_recommendations_that_ran_out_of_memory_plan_as_not_fitting(
    card_gib: float, knobs: tuple[str, ...]
) -> None:
    ran = make_plan(resolve(_spec(HYBRID, card_gib, 4096, *knobs)))
    assert not ran.fits
    assert "prefill CUDA graphs (up to 8192 tokens)" in {t.name for t in ran.terms}
    assert ran.recommended_args and ran.recommended_args != list(knobs)
    again = make_plan(resolve(_spec(HYBRID, card_gib, 4096, *ran.recommended_args)))
    assert again.fits and _margin(again) >= EXTRAPOLATION_MARGIN_GIB


def test_a_smaller_chunk_makes_the_same_knobs_start() -> None:
    """The control start: with --chunked-prefill-size 4096 the 79.6 GiB knobs started."""
    knobs = _knobs("0.94", 115, 23)
    assert make_plan(resolve(_spec(HYBRID, 79.6, 4096, *knobs, "--chunked-prefill-size", "4096"))).fits


def test_the_whole_card_at_context_4096_plans_the_low_point_it_had() -> None:
    """Recommended before the capture was modelled, it started with about 0.1 GiB free at its low
    point against 1.62 promised: the plan now promises no more than that, and recommends less."""
    plan = make_plan(resolve(_spec(HYBRID, 139.8, 4096, *_knobs("0.96", 363, 121))))
    assert plan.fits and _margin(plan) <= 0.1 + 0.15
    assert plan.recommended_args[:2] != ["--mem-fraction-static", "0.96"]


def test_the_dense_recommendation_plans_as_fitting_when_pinned() -> None:
    """Qwen3-8B on 47.6 GiB: 0.94 with 2,616 requests reached ready; so does the plan of those
    knobs, and of the knobs the plan now recommends."""
    ran = make_plan(
        resolve(_spec(DENSE, 47.6, 40960, "--mem-fraction-static", "0.94", "--max-running-requests", "2616"))
    )
    assert ran.fits
    plan = make_plan(resolve(_spec(DENSE, 47.6, 40960)))
    pinned = make_plan(resolve(_spec(DENSE, 47.6, 40960, *plan.recommended_args)))
    assert pinned.fits and pinned.recommended_args == plan.recommended_args


def test_context_4096_captures_the_whole_chunk_from_0_5_17_and_the_context_before() -> None:
    """0.5.16 clamps the captured sizes to an explicit --context-length; 0.5.17 keeps every size
    up to the request pool x the context (cuda_graph_setup.py)."""
    for version, captured in (("0.5.16", 4096), ("0.5.17", 8192)):
        spec = _spec(HYBRID, 139.8, 4096, version=version)
        shape, args = plan_inputs(spec)
        s = planner_settings(spec, shape, args)
        assert q.captured_prefill_tokens(s, release_rules(version), requests=40) == captured
    # one request of 2,048 tokens: the capture stops at 2,048
    spec = _spec(HYBRID, 139.8, 2048)
    shape, args = plan_inputs(spec)
    s = planner_settings(spec, shape, args)
    assert q.captured_prefill_tokens(s, release_rules("0.5.17"), requests=1) == 2048


@pytest.mark.parametrize(
    "flags",
    [
        ("--disable-cuda-graph",),
        ("--disable-prefill-cuda-graph",),
        ("--cuda-graph-backend-prefill", "disabled"),
    ],
)
def test_disabled_prefill_graphs_plan_no_prefill_graph_and_no_gate(flags: tuple[str, ...]) -> None:
    plan = make_plan(resolve(_spec(HYBRID, 79.6, 8192, *flags)))
    assert not any(t.name.startswith("prefill CUDA graphs") for t in plan.terms)
    assert not any("prefill graph gate" in n for n in plan.notes)


def test_a_chunk_above_the_context_and_a_context_below_the_chunk_give_a_verdict() -> None:
    for knobs in (("--chunked-prefill-size", "16384"), ("--chunked-prefill-size", "512")):
        plan = make_plan(resolve(_spec(HYBRID, 79.6, 2048, *knobs)))
        assert plan.recommended_args or plan.notes


def test_a_card_smaller_than_the_weights_is_a_verdict_not_a_crash() -> None:
    plan = make_plan(resolve(_spec(HYBRID, 40.0, 8192)))
    assert not plan.fits and "use more GPUs" in plan.notes[0]


def _sizing_near_gate(fraction: str) -> tuple[str | None, float]:
    spec = _spec(HYBRID, 79.6, 8192, "--mem-fraction-static", fraction, "--max-mamba-cache-size", "96")
    shape, args = plan_inputs(spec)
    s = planner_settings(spec, shape, args)
    rules = release_rules("0.5.17")
    z = size(
        shape,
        s,
        rules,
        free_before_load_gib=q.free_before_load_gib(79.6, 1),
        weights_gib=q.target_weights_gib(shape, s),
    )
    return gate_note(z, shape, rules), z.free_at_prefill_capture_gib


def test_the_gate_says_which_side_and_what_moves_it() -> None:
    """The recorded p80 start had 6.24 GiB free after its pools at 0.92: the plan finds fractions
    just above and just below SGLang's 4 GiB gate and says so; far above it says nothing."""
    notes = {fraction: _sizing_near_gate(fraction) for fraction in ("0.90", "0.94", "0.95", "0.96", "0.97")}
    sides = {f: (note, free) for f, (note, free) in notes.items()}
    far_above = [f for f, (note, free) in sides.items() if free >= 5.0]
    above = [f for f, (note, free) in sides.items() if 4.0 <= free < 5.0]
    below = [f for f, (note, free) in sides.items() if free < 4.0]
    assert far_above and above and below, sides
    assert all(sides[f][0] is None for f in far_above)
    for f in above:
        note = sides[f][0] or ""
        assert (
            "above the gate" in note and "--chunked-prefill-size 4096" in note and "one less request" in note
        )
    for f in below:
        assert "below the gate" in (sides[f][0] or "")


def test_an_explicit_prefill_backend_has_no_gate() -> None:
    spec = _spec(
        HYBRID, 79.6, 8192, "--mem-fraction-static", "0.96", "--cuda-graph-backend-prefill", "breakable"
    )
    assert not any("prefill graph gate" in n for n in make_plan(resolve(spec)).notes)


def test_the_plan_says_whether_it_extrapolates_and_which_margin_it_keeps() -> None:
    inside = make_plan(resolve(_spec(HYBRID, 79.6, 8192)))
    assert any(n.startswith("inside the measured range") and "0.50 GiB margin" in n for n in inside.notes)
    outside = make_plan(resolve(_spec(DENSE, 47.6, 4096)))
    note = next(n for n in outside.notes if n.startswith("extrapolating"))
    assert "Qwen3ForCausalLM" in note and "context 4,096" in note and "47.6 GiB card" in note
    assert f"{EXTRAPOLATION_MARGIN_GIB:.2f} GiB margin" in note
    assert FIT_0517.valid is not None and str(FIT_0517.valid) in note


def test_tensor_parallel_is_outside_a_fit_of_one_gpu_starts() -> None:
    """Every fitted start ran at TP 1: sharded pools and all-reduce buffers are not in it."""
    one = make_plan(resolve(_spec(HYBRID, 139.8, 32768, "--tp", "1")))
    assert not any(n.startswith("extrapolating") for n in one.notes)
    two = _spec(HYBRID, 139.8, 32768, "--tp", "2")
    two = two.model_copy(update={"gpu": two.gpu.model_copy(update={"count": 2})})
    note = next(n for n in make_plan(resolve(two)).notes if n.startswith("extrapolating"))
    assert "tensor parallel 2" in note and "TP 1" in note
    assert f"{EXTRAPOLATION_MARGIN_GIB:.2f} GiB margin" in note


def test_the_moe_prefill_graph_is_planned_at_what_the_engine_kept() -> None:
    """A hybrid MoE (Qwen3.6-35B-A3B shape) with MTP at 32k printed 2.22 GiB kept; planned 0.77."""
    spec = Spec.model_validate(
        {
            "name": "moe",
            "model": {"path": str(REPO / "examples" / "models" / "qwen3.6-35b-a3b-vllm")},
            "gpu": {"memory_gib": 139.8},
            "engine": {
                "name": "sglang",
                "version": "0.5.17",
                "args": [*RUN_FLAGS, "--context-length", "32768", "--speculative-algorithm", "NEXTN"],
            },
        }
    )
    graph = next(t for t in make_plan(resolve(spec)).terms if t.name.startswith("prefill CUDA graphs"))
    assert graph.gib == pytest.approx(2.22, abs=0.01)


H200_LOGS = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"
#: a real 0.5.17 start that ran out of memory capturing its prefill graph
CAPTURE_OOM_LOG = H200_LOGS / "r17-plain-rec-96.log"
READY_LOG = H200_LOGS / "r17-plain-rec2-96.log"


def test_the_capture_oom_is_read_from_the_log() -> None:
    assert prefill_capture_oom(CAPTURE_OOM_LOG.read_text())
    assert not prefill_capture_oom(READY_LOG.read_text())


def test_replan_halves_the_chunk_when_the_capture_ran_out_and_the_plan_still_says_fits() -> None:
    """The knobs the re-plan recommends from that start's numbers, run and out of memory in the
    prefill capture: re-planning alone would change nothing, the capture rule moves the chunk."""
    knobs = _knobs("0.93", 190, 38)
    spec = _spec("qwen3.6-27b", 95.6, 32768, *knobs)
    assert replan(resolve(spec), READY_LOG.read_text(), None) is None  # a ready start: nothing to move
    found = replan(resolve(spec), CAPTURE_OOM_LOG.read_text(), None)
    assert found is not None
    assert any(
        change.startswith("--chunked-prefill-size ") and change.endswith("-> 4096")
        for change in found.changes
    )
    assert any("capturing the prefill CUDA graph" in reason for reason in found.reasons)
    # at the smallest chunk the rule has nothing left to move
    assert capture_oom_fix(4096) == ["--chunked-prefill-size", "2048"] and capture_oom_fix(2048) == []
