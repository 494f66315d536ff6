"""`up` runs the real check, then the plan; a check error refuses before anything is shipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.launch.preflight import run_preflight
from tests.counting import Counted
from tests.launch.conftest import SpecFactory


def test_check_error_refuses_with_its_fix_and_skips_the_plan(make_spec: SpecFactory, run_home: Path) -> None:
    pre = run_preflight(resolve(make_spec("sglang_ready", args=["--speculative-algorithm", "MTP"])))
    assert pre.cause == "config"
    assert len(pre.errors) == 1
    assert pre.errors[0].startswith("sglang-spec-algorithm-unknown: Unknown speculative algorithm name: MTP")
    # the engine's own adjustments (page size 1 on CUDA) are facts, not warnings to print
    assert not any(w.startswith("sglang-page-size-default") for w in pre.warnings)
    assert pre.fix is not None and pre.fix.args == ("--speculative-algorithm", "NEXTN")
    assert pre.plan is None  # no plan for args the engine would reject


def test_clean_check_then_plan(make_spec: SpecFactory, run_home: Path) -> None:
    pre = run_preflight(resolve(make_spec("sglang_ready")))
    assert pre.errors == []
    assert pre.plan is not None and pre.plan.engine == "sglang"
    assert pre.plan.fits is True


def test_plan_that_does_not_fit_refuses_with_the_recommended_knobs(
    make_spec: SpecFactory, run_home: Path
) -> None:
    pre = run_preflight(resolve(make_spec("sglang_ready", gpu_memory_gib=0.5)))
    assert pre.cause == "oom"
    assert pre.errors and pre.errors[0].startswith("the plan does not fit")


def test_refusal_for_an_unknown_flag_keeps_what_to_drop(make_spec: SpecFactory, run_home: Path) -> None:
    """`up`'s refusal used to copy only args and env out of the finding's fix, so its advice
    for a flag the release does not have said nothing about dropping it."""
    pre = run_preflight(resolve(make_spec("sglang_ready", args=["--frobnicate", "7"])))
    assert pre.cause == "config"
    assert pre.fix is not None and pre.fix.remove_args == ("--frobnicate",)
    assert "drop --frobnicate" in pre.fix.describe()


def test_preflight_reads_the_model_once_and_evaluates_the_flags_once(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check and plan read one resolution of the spec: `up` (and bench) read the model once
    per start, where they used to read it for check and again for the plan."""
    spec = make_spec("sglang_ready")
    found = Counted(monkeypatch)
    pre = run_preflight(resolve(spec))
    assert pre.plan is not None and pre.plan.fits
    assert found.reads == 1
    assert found.evaluations[tuple(spec.engine.args)] == 1
