"""The capture round on the H200 (gpu/sglang/job.py step `capture`, SGLang 0.5.17,
tests/data/gpu-runs/sglang-0.5.17-h200-capture-*): starts chosen to break the plan, each the plan's
recommendation of its day for its card and context, and one fraction step (0.01) above it.

The recommendation started; the step above failed or kept less than the plan's stated margin at
its measured low point; the plan of every start as it ran holds its verdict, and never promises
more free memory at the low point than the start had (beyond the fit's residual)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "sglang"))

import peaks

from specpilot.check.resolved import resolve
from specpilot.engines.sglang.releases import release_rules
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.planner import planner_settings, size
from specpilot.plan.startup_peak import measure_startup_peak
from specpilot.spec import load_spec

RUNS = peaks.DATA
PREFIX = "sglang-0.5.17-h200-capture-"
STARTS = sorted(p.name.removeprefix(PREFIX) for p in RUNS.glob(f"{PREFIX}*"))
LADDERS = sorted({name.rsplit("-", 1)[0] for name in STARTS})
#: the fitted plan may promise at most this much beyond a start's measured low point (GiB)
RESIDUAL_GIB = 0.15


def _ready(name: str) -> bool:
    up = json.loads((RUNS / f"{PREFIX}{name}" / "up.json").read_text())
    return bool(up["phase"] == "ready")


def _lowest_free_gib(name: str) -> float:
    folder = RUNS / f"{PREFIX}{name}"
    peak = measure_startup_peak(folder / "samples", (folder / "engine.log").read_text(), peaks.MARKERS)
    return peaks.engine_view_gib(peak, peak.lowest_free_gib)


def _required_margin_gib(name: str) -> float:
    spec = load_spec(peaks.spec_path(RUNS / f"{PREFIX}{name}"))
    shape, args = plan_inputs(spec)
    s = planner_settings(spec, shape, args)
    z = size(
        shape,
        s,
        release_rules(spec.engine.version),
        free_before_load_gib=q.free_before_load_gib(spec.gpu.memory_gib, s.tp_size),
        weights_gib=q.target_weights_gib(shape, s),
    )
    return z.required_margin_gib


def test_the_round_is_recorded() -> None:
    assert len(LADDERS) >= 2 and all(f"{ladder}-rec" in STARTS for ladder in LADDERS)


@pytest.mark.parametrize("ladder", LADDERS)
def test_every_recommendation_started_first_time_and_plans_as_fitting(ladder: str) -> None:
    name = f"{ladder}-rec"
    assert _ready(name)
    assert make_plan(resolve(load_spec(peaks.spec_path(RUNS / f"{PREFIX}{name}")))).fits


@pytest.mark.parametrize("ladder", [ladder for ladder in LADDERS if f"{ladder}-above" in STARTS])
def test_the_step_above_failed_or_kept_less_than_the_stated_margin(ladder: str) -> None:
    """Unless the engine's 4 GiB gate skipped the prefill graph: then the plan, which still counts
    the graph, said the start lands below the gate, and the room is the graph it did not keep."""
    name = f"{ladder}-above"
    if not _ready(name) or _lowest_free_gib(name) < _required_margin_gib(f"{ladder}-rec"):
        return
    log = (RUNS / f"{PREFIX}{name}" / "engine.log").read_text()
    assert "Disabling auto-selected prefill CUDA graph" in log
    rec = make_plan(resolve(load_spec(peaks.spec_path(RUNS / f"{PREFIX}{ladder}-rec"))))
    assert any("below the gate" in note for note in rec.notes)


def test_the_gate_fired_where_the_plan_said_and_nowhere_else() -> None:
    """The plan's free memory when the prefill capture begins against the engine's own reading:
    below 4 GiB the engine skipped the graph, above it captured it."""
    for name in STARTS:
        log = (RUNS / f"{PREFIX}{name}" / "engine.log").read_text()
        plan = make_plan(resolve(load_spec(peaks.spec_path(RUNS / f"{PREFIX}{name}"))))
        said_below = any("below the gate" in note for note in plan.notes)
        assert said_below == ("Disabling auto-selected prefill CUDA graph" in log), name


@pytest.fixture(scope="module")
def calibrated() -> dict[str, peaks.Row]:
    """Each start's plan calibrated from its log up to the weights, and its measured peak."""
    return {row[0].removeprefix(PREFIX): row for row in peaks.rows(RUNS) if row[0].startswith(PREFIX)}


@pytest.mark.parametrize("name", STARTS)
def test_the_plan_never_promises_more_free_memory_than_a_start_had(
    name: str, calibrated: dict[str, peaks.Row]
) -> None:
    _, _, plan, peak, _ = calibrated[name]
    if peak.ready:
        assert peaks.margin_gib(plan) <= peaks.engine_view_gib(peak, peak.lowest_free_gib) + RESIDUAL_GIB
    else:
        assert not plan.fits or peaks.margin_gib(plan) < RESIDUAL_GIB
