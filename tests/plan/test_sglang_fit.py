"""SGLang 0.5.17's post-pool fit against the starts sampled on the H200
(tests/data/gpu-runs/sglang-0.5.17-h200-*, `gpu/sglang/fit.py`, docs/gpu-validation.md).

The fit is the data's: refitting the recorded samples gives the constants the 0.5.17 row's
`post_pool_fit` holds. And the plan it makes is held to every start: the plan never promises more free memory
at the low point than the start had (beyond the fit's residual), the start that failed in its
prefill capture plans as not fitting, and the recommendation is the last fraction that started
(one step above it failed, or kept less than the stated margin)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "sglang"))

import fit
import peaks

from specpilot.check.resolved import resolve
from specpilot.engines.sglang.releases import release_rules
from specpilot.plan import make_plan
from specpilot.plan.types import Plan, SglangDetails
from specpilot.spec import Spec, load_spec
from tests.plan.fits import set_fit

RUNS = peaks.DATA
PREFIX = "sglang-0.5.17-h200-"
#: the fitted plan's margin may exceed a start's measured low point by at most this (GiB): the
#: largest residual of the fit, well inside the 0.5 GiB the recommendation keeps
RESIDUAL_GIB = 0.15


@pytest.fixture(scope="module")
def measured() -> list[fit.Measured]:
    return fit.collect()


def test_refitting_the_samples_gives_the_constants_the_plan_uses(measured: list[fit.Measured]) -> None:
    refit = fit.fit(measured, fit.printed_families())
    assert refit == release_rules("0.5.17").post_pool_fit


def test_every_start_low_point_was_in_the_prefill_capture(measured: list[fit.Measured]) -> None:
    """What the fit rests on: nothing after the prefill graph's capture went lower."""
    assert len(measured) >= 8
    assert {m.peak.phase for m in measured} == {"graph: target prefill"}


def _plan(name: str) -> Plan:
    folder = RUNS / f"{PREFIX}{name}"
    return make_plan(resolve(load_spec(next(p for p in folder.glob("*.toml")))))


@pytest.fixture(scope="module")
def calibrated() -> dict[str, Plan]:
    """Each start's plan calibrated from its log up to the weights, as `peaks.py` makes it."""
    return {name: plan for name, _, plan, _, _ in peaks.rows(RUNS)}


def test_the_plan_never_promises_more_free_memory_than_a_start_had(
    measured: list[fit.Measured], calibrated: dict[str, Plan]
) -> None:
    ready = [m for m in measured if m.peak.ready]
    assert len(ready) >= 8
    for start in ready:
        assert peaks.margin_gib(calibrated[start.name]) <= start.lowest_free_gib + RESIDUAL_GIB, start.name


def test_the_start_that_failed_in_its_capture_plans_as_not_fitting() -> None:
    plan = _plan("m96-above")  # 95.6 GiB, MTP, 0.99: CUDA error in the prefill capture
    assert not plan.fits
    assert any(p.code == "reserve_too_small" for p in plan.problems)


def _bare(name: str) -> Spec:
    spec = load_spec(next((RUNS / f"{PREFIX}{name}").glob("*.toml")))
    args = spec.engine.args[: spec.engine.args.index("--mem-fraction-static")]
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": args})})


def _fraction(plan: Plan) -> str:
    return plan.recommended_args[plan.recommended_args.index("--mem-fraction-static") + 1]


@pytest.mark.parametrize(
    ("name", "last_started", "above"),
    [
        ("m96-edge", "0.98", "m96-above"),  # 0.99 failed
        ("p80-rec", "0.92", "p80-above"),  # 0.93 started with 0.09 GiB at its low point
        ("plain", "0.95", "p140-above"),  # 0.96 started with 0.06 GiB
    ],
)
def test_the_recommendation_is_the_last_step_that_started(name: str, last_started: str, above: str) -> None:
    """The card's recommendation is the fraction started on the GPU; the step above it failed or
    left less than the stated margin, and the plan says so."""
    assert _fraction(make_plan(resolve(_bare(name)))) == last_started
    above_plan = _plan(above)
    assert isinstance(above_plan.details, SglangDetails)
    fitted = release_rules("0.5.17").post_pool_fit
    assert fitted is not None
    assert not above_plan.fits or above_plan.details.margin_gib < fitted.stated_margin_gib


def test_mtp_on_a_96_gb_card_gains_concurrency_from_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    fitted = make_plan(resolve(_bare("m96-edge")))
    set_fit(monkeypatch, None)
    estimated = make_plan(resolve(_bare("m96-edge")))
    assert (_fraction(estimated), _fraction(fitted)) == ("0.95", "0.98")
    requests = [
        int(p.recommended_args[p.recommended_args.index("--max-running-requests") + 1])
        for p in (estimated, fitted)
    ]
    assert requests == [21, 23]
