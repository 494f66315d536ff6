"""The bench search on a real SGLang 0.5.17 (tests/data/gpu-runs/sglang-0.5.17-h100-search-3, one
H100 80GB, 2026-12-08) and `up` of what it wrote (.../sglang-0.5.17-h100-upbest-2): the winner was
written only after a second configuration was measured, the budget it said before starting is the
budget's own arithmetic, every point is the one bench prepares today, and the server `up` started
from best.toml ran the winner's knobs."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from specpilot.bench.budget import Costs, StartCosts
from specpilot.bench.variants import Variant, prepare
from specpilot.check.resolved import release_of
from specpilot.spec import load_spec

RUNS = Path(__file__).resolve().parents[1] / "data" / "gpu-runs"
SEARCH = RUNS / "sglang-0.5.17-h100-search-3"
UPBEST = RUNS / "sglang-0.5.17-h100-upbest-2"
POINTS = [Variant().at(cap) for cap in (30, 15, 8)] + [Variant("NEXTN", 3).at(cap) for cap in (12, 6, 3)]


def _bench() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SEARCH / "job-bench.json").read_text())
    return data


def _rows() -> dict[str, dict[str, Any]]:
    return {row["label"]: row for row in _bench()["variants"]}


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.label)
def test_every_recorded_point_is_the_point_bench_prepares_now(point: Variant) -> None:
    spec = load_spec(SEARCH / "search.repo.toml")
    prepared = prepare(spec, release_of(spec), point, "search")
    recorded = _rows()[point.label]
    assert prepared.refused is None
    assert list(prepared.recommended) == recorded["recommended_args"]
    assert list(prepared.spec.engine.args) == recorded["argv"]


def test_the_winner_was_measured_at_its_own_cap_against_a_second_configuration() -> None:
    bench, rows = _bench(), _rows()
    assert len(bench["search"]["compared"]) >= 2
    measured = {label: row for label, row in rows.items() if not row["predicted"]}
    assert {label.split("@")[0] for label in measured} == set(bench["search"]["compared"])
    winner = rows[bench["winner"]]
    assert winner["search"] == "measured" and winner["rows_done"] == bench["sample"]["rows"]
    others = [row for label, row in measured.items() if label != bench["winner"]]
    assert all(winner["projected_s"] < row["projected_s"] for row in others)
    for row in rows.values():
        if row["predicted"]:  # marked, never started, never the winner
            assert row["search"] == "predicted" and row["up_s"] is None and row["rows_done"] == 0


def test_the_recorded_ratio_of_the_winner_to_the_other_configuration() -> None:
    rows, winner = _rows(), _bench()["winner"]
    ratio = json.loads((SEARCH / "results.json").read_text())["search"]["winner_vs_other"]
    assert ratio["ratio"] == round(rows[winner]["projected_s"] / rows[ratio["other"]]["projected_s"], 3)
    assert ratio["ratio"] < 1


def test_the_budget_said_before_the_start_is_the_budgets_arithmetic() -> None:
    """No start was recorded on the fresh machine: the starts it assumed are the engine's stated
    ones, and the need follows from them, the warm-up, the answers' bound and the largest caps."""
    bench = _bench()
    said = bench["search"]["budget"]
    first_s, later_s = (float(s) for s in re.findall(r"~(\d+) s (?:first|later)", said["assumed"]))
    costs = Costs(StartCosts(first_s, later_s, ""), bench["warmup_s"], bench["sampling"]["max_tokens"])
    largest = [_rows()[label]["max_running_requests"] for label in ("plain@30", "NEXTN-3@12")]
    need = costs.need(largest, bench["sample"]["rows"])
    assert (said["expected_s"], said["least_s"]) == (round(need.expected_s, 1), round(need.least_s, 1))
    assert said["least_s"] <= bench["budget_s"] < said["expected_s"]
    assert bench["search"]["spent_s"] <= bench["budget_s"]


def test_up_of_best_toml_ran_the_winners_knobs() -> None:
    assert (UPBEST / "best.toml").read_text() == (SEARCH / "best.toml").read_text()
    winner = _rows()[_bench()["winner"]]
    assert list(load_spec(UPBEST / "best.toml").engine.args) == winner["argv"]
    log = gzip.decompress((UPBEST / "engine.log.gz").read_bytes()).decode()
    ran = dict(re.findall(r"(\w+)=([0-9.]+|None)[,)]", log[: log.index("Load weight begin")]))
    assert {
        key: ran[key] for key in ("mem_fraction_static", "max_mamba_cache_size", "max_running_requests")
    } == {
        "mem_fraction_static": "0.91",
        "max_mamba_cache_size": "90",
        "max_running_requests": "30",
    }
    assert ran["prefill_max_requests"] == "11"
    up = json.loads((UPBEST / "up.json").read_text())
    assert up["phase"] == "ready" and up["allocations"]["max_running_requests"] == 30
    assert not any(diff["warn"] for diff in up["plan_diff"])


def test_the_rows_through_it_stopped_at_the_yield_guard_as_random_weights_must() -> None:
    """Random weights answer to --max-tokens 64: all 200 rows cut, so the guard ends it, exit 1."""
    generated = json.loads((UPBEST / "generate.json").read_text())
    assert generated["done"] == 200 and generated["flags"]["truncated"] == 200
    assert generated["exit_code"] == 1
    assert "yield guard" in (UPBEST / "generate.err").read_text()
