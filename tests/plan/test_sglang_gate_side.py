"""The prefill-graph gate as data (`Plan.prefill_gate`): which side of SGLang 0.5.16/0.5.17's
free-memory gate a plan lands on and, where near, the same configuration's flags on the other
side, which bench measures beside it. Knobs as in test_sglang_capture (the Qwen3.6-27B text
shape on a 79.6 GiB card, context 8,192: 0.90 is far above the gate, 0.94 just above, 0.97 below)."""

from __future__ import annotations

import pytest

from specpilot.check.resolved import resolve
from specpilot.engines.flags import parse_version
from specpilot.engines.registry import table_for
from specpilot.engines.sglang.releases import RELEASES, SglangRelease
from specpilot.plan import make_plan
from specpilot.plan.sglang.planner import GATE_BAND_GIB, PREFILL_GRAPH_OFF_FLAG
from specpilot.plan.types import Plan, PrefillGate
from tests.plan.test_sglang_capture import HYBRID, _spec


def _plan(fraction: str, *more: str, version: str = "0.5.17") -> Plan:
    knobs = ("--mem-fraction-static", fraction, "--max-mamba-cache-size", "96", *more)
    return make_plan(resolve(_spec(HYBRID, 79.6, 8192, *knobs, version=version)))


def _gate(plan: Plan) -> PrefillGate:
    assert plan.prefill_gate is not None
    return plan.prefill_gate


def test_below_the_gate_the_other_side_keeps_the_graph_at_a_lower_fraction() -> None:
    gate = _gate(_plan("0.97"))
    assert gate.near and not gate.graph_kept and gate.free_gib < gate.gate_gib and not gate.replan
    args = list(gate.other_side_args)
    lower = args[args.index("--mem-fraction-static") + 1]
    assert float(lower) < 0.97 and "--max-running-requests" in args
    # the other side, planned as given, keeps the graph a band above the gate and fits
    other = make_plan(resolve(_spec(HYBRID, 79.6, 8192, *args)))
    assert other.fits and _gate(other).graph_kept and not _gate(other).near
    assert _gate(other).free_gib >= gate.gate_gib + GATE_BAND_GIB
    assert "prefill graph kept" in gate.other_side and lower in gate.other_side


def test_just_above_the_gate_the_other_side_turns_the_graph_off_and_plans_again() -> None:
    plan = _plan("0.94")
    gate = _gate(plan)
    assert gate.near and gate.graph_kept and gate.gate_gib <= gate.free_gib < gate.gate_gib + GATE_BAND_GIB
    assert gate.other_side_args == (PREFILL_GRAPH_OFF_FLAG,) and gate.replan
    off = _plan("0.94", *gate.other_side_args)
    assert off.prefill_gate is None  # nothing captured, nothing gated
    assert not any(t.name.startswith("prefill CUDA graphs") for t in off.terms)


def test_far_above_the_gate_no_side_and_a_release_without_a_gate_no_record() -> None:
    far = _gate(_plan("0.90"))
    assert not far.near and far.graph_kept and far.other_side_args == () and far.other_side == ""
    assert _plan("0.97", version="0.5.18").prefill_gate is None


def test_a_plan_read_back_keeps_its_gate() -> None:
    plan = _plan("0.97")
    assert Plan.from_json(plan.to_json()).prefill_gate == plan.prefill_gate
    older = {k: v for k, v in plan.to_json().items() if k != "prefill_gate"}  # a plan.json from before
    assert Plan.from_json(older).prefill_gate is None


@pytest.mark.parametrize("release", [r for r in RELEASES if r.prefill_graph_gate_gib], ids=lambda r: r.first)
def test_every_gated_release_reads_the_flag_that_turns_the_graph_off(release: SglangRelease) -> None:
    assert PREFILL_GRAPH_OFF_FLAG in table_for("sglang", parse_version(release.first)).by_spelling
