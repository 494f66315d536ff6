"""The report scripts under gpu/ and gpu/sglang/ run on the committed data (they are not run on a GPU,
so a change in what they import shows here, not on the next lease)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "sglang"))

import compare
import e2e_tools
import peaks

REPO = Path(__file__).resolve().parents[2]


def test_compare_prints_each_matrix_start_with_its_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    compare.main("r17-plain-rec")
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| r17-")]
    # rec2-80 and rec2-96 started, rec-96 ran out of memory in its prefill capture: each as planned
    assert [row.split(" | ")[0] for row in rows] == [
        "| r17-plain-rec-96",
        "| r17-plain-rec2-80",
        "| r17-plain-rec2-96",
    ]
    assert all(" ok |" in row for row in rows)


def test_peaks_prints_the_margin_against_the_measured_low_point(capsys: pytest.CaptureFixture[str]) -> None:
    peaks.main()
    out = capsys.readouterr().out
    assert "| sglang-0.5.17-h200-m96-above | 95.6 | 0.99 | no |" in out
    assert "graph: target prefill" in out


def test_e2e_summary_tables_the_recorded_vllm_pairs(tmp_path: Path) -> None:
    """`gpu/e2e_tools.py summarize` on the committed vLLM saturation run (its files laid out as
    run_e2e.sh writes them): one row per concurrency, specpilot's ratio to `vllm bench serve`."""
    recorded = REPO / "tests" / "data" / "gpu-runs" / "vllm-0.26.0-h200-saturation"
    results = tmp_path / "e2e" / "results"
    results.mkdir(parents=True)
    for path in recorded.glob("c*"):
        shutil.copyfile(path, results / f"saturation.{path.name}")
    e2e_tools.summarize(tmp_path / "e2e", tmp_path)
    pairs = json.loads((tmp_path / "results.json").read_text())["steps"]["saturation"]["pairs"]
    assert [(p["concurrency"], p["ratio_steady"]) for p in pairs] == [(16, 1.0239), (256, 1.0422), (64, 1.01)]
    assert "| 64 | 7099.9 | 7170.8 | 1.01 |" in (tmp_path / "summary.md").read_text()


def test_the_search_step_records_every_point_and_the_winner_against_the_other_configuration() -> None:
    """`job.py`'s search step on the 2026-12-03 H200 search: each point's status and rate (measured
    or predicted), and the winner's projected job against the other configuration's best point
    measured at its own cap (plain@119, 120.9 s, against NEXTN-3@51's screen, 231.2 s)."""
    import job

    recorded = REPO / "tests" / "data" / "gpu-runs" / "sglang-0.5.17-h200-search" / "job-bench.json"
    found = job.summarize_search(json.loads(recorded.read_text()))
    assert found["winner"] == "plain@119"
    points = {p["label"]: p for p in found["points"]}
    assert points["plain@60"]["predicted"] and points["plain@60"]["measured_tokens_per_s"] is None
    assert (
        points["plain@119"]["status"] == "measured" and points["plain@119"]["measured_tokens_per_s"] == 1064.6
    )
    assert points["NEXTN-3@13"]["status"] == "refused" and points["NEXTN-3@13"]["reason"]
    assert found["winner_vs_other"] == {
        "other": "NEXTN-3@51",
        "winner_projected_s": 120.9,
        "other_projected_s": 231.2,
        "ratio": round(120.9 / 231.2, 3),
    }
