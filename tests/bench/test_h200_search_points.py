"""The points of the H200 search (tests/data/gpu-runs/sglang-0.5.17-h200-search, 2026-12-03) as
bench prepares them now: what that run showed wrong, each with the point it concerned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.bench.variants import Prepared, Variant, prepare
from specpilot.check.resolved import release_of
from specpilot.spec import load_spec

RUN = Path(__file__).resolve().parents[1] / "data" / "gpu-runs" / "sglang-0.5.17-h200-search"
POINTS = [Variant().at(cap) for cap in (119, 60, 30)] + [Variant("NEXTN", 3).at(cap) for cap in (51, 26, 13)]


def _prepared(point: Variant) -> Prepared:
    spec = load_spec(RUN / "search.repo.toml")
    return prepare(spec, release_of(spec), point, "search")


def _flag(args: tuple[str, ...] | list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.label)
def test_every_point_is_measured_as_it_would_serve_the_whole_job(point: Variant) -> None:
    """On the H200 the winner (plain@119) started, and `--write` wrote it, without the radix
    copy-on-write bound its plan asks for to serve (`plan` of the same spec: `starts and serves
    with ... --prefill-max-requests 10`): the server `up` started from best.toml could die of
    memory while serving the job, as the 2026-12-02 job did."""
    prepared = _prepared(point)
    assert prepared.refused is None and prepared.plan is not None and prepared.plan.fits
    bound = _flag(prepared.recommended, "--prefill-max-requests")
    assert bound is not None and int(bound) >= 1
    assert _flag(prepared.spec.engine.args, "--prefill-max-requests") == bound
    assert _flag(prepared.spec.engine.args, "--max-running-requests") == str(point.running_cap)


def test_the_recorded_winner_lacked_the_bound_it_now_carries() -> None:
    recorded = json.loads((RUN / "job-bench.json").read_text())
    winner = next(v for v in recorded["variants"] if v["label"] == recorded["winner"])
    assert "--prefill-max-requests" not in winner["argv"]
    prepared = _prepared(Variant().at(119))
    assert _flag(prepared.spec.engine.args, "--prefill-max-requests") == "10"


def test_a_lower_cap_that_lets_the_engine_capture_its_prefill_graph_steps_its_fraction_down() -> None:
    """NEXTN-3@13 was refused on the H200: at the configuration's 0.98 its smaller decode graphs
    leave SGLang 0.5.17 room past its 4 GiB gate, the prefill graph (3.07 GiB) is captured, and
    the reserve is 0.20 GiB short. The point is now planned at its own cap, one step lower."""
    recorded = json.loads((RUN / "job-bench.json").read_text())
    [refused] = [v for v in recorded["variants"] if v["label"] == "NEXTN-3@13"]
    assert refused["status"] == "refused" and "prefill CUDA graphs" in refused["reason"]
    prepared = _prepared(Variant("NEXTN", 3).at(13))
    assert prepared.refused is None and prepared.plan is not None and prepared.plan.fits
    assert float(_flag(prepared.spec.engine.args, "--mem-fraction-static") or 0) == pytest.approx(0.97)
    assert _flag(prepared.spec.engine.args, "--max-running-requests") == "13"
    wider = _prepared(Variant("NEXTN", 3).at(51))
    assert float(_flag(wider.spec.engine.args, "--mem-fraction-static") or 0) == pytest.approx(0.98)
