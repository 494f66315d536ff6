"""The yield guard's stop on a real SGLang 0.5.17 (tests/data/gpu-runs/sglang-0.5.17-h100-jobrun-guard):
what the job recorded agrees with the guard's own arithmetic, and the stop is the one the issue
asks for (before 40% of the input, exit non-zero, max_tokens and the measured lengths named,
every row once, nothing left on the GPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specpilot.generate.yields import propose_budget, wilson_upper

RUN = Path(__file__).resolve().parents[1] / "data" / "gpu-runs" / "sglang-0.5.17-h100-jobrun-guard"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RUN / name).read_text())
    return data


def test_the_guard_stopped_the_real_job_early_and_said_why() -> None:
    shown = _load("job.json.out")
    checked = _load("results.json")["jobrun"]
    assert shown["exit_code"] == 1 and checked["exit"] == 1
    total = shown["yield"]["rows_total"]
    assert checked["rows_when_stopped"]["sent"] < 0.4 * total
    assert checked["rows"]["written"] == checked["rows"]["distinct"] == checked["rows_when_stopped"]["done"]
    assert checked["gpu_processes_after"] == []
    message = shown["message"]
    assert "yield guard:" in message and "cut at max_tokens 64" in message
    assert "p50 64, p90 64, p99 64" in message and "--max-tokens 7601 --retry-truncated" in message


def test_the_recorded_stop_is_the_guards_arithmetic() -> None:
    guard = _load("job.record.json")["yield_guard"]
    judged, clean = guard["judged"], guard["clean"]
    assert guard["stopped_early"] and judged >= guard["to_judge"]
    assert guard["upper_bound"] == round(wilson_upper(clean, judged), 4)
    assert guard["upper_bound"] * 100 < guard["min_clean_yield_pct"]
    lengths = guard["lengths"]
    budget = propose_budget(
        [lengths["max_tokens"]] * lengths["answers"],
        lengths["max_tokens"],
        lengths["context_tokens"],
        lengths["longest_prompt_tokens"],
    )
    assert budget.to_json() == lengths


def test_the_recorded_waste_is_generates_share_of_the_gpu_hours() -> None:
    record = _load("job.record.json")
    hours = record["gpu_hours_wasted"]
    spent = sum(float(stage.get("gpu_hours", 0.0)) for stage in record["stages"].values())
    assert hours["total_gpu_hours"] == round(spent, 6)
    assert hours["parts"]["rows_left_out"] == record["stages"]["generate"]["gpu_hours"]  # every row flagged
    assert record["gpu_hours_wasted_share"] == round(hours["wasted_gpu_hours"] / hours["total_gpu_hours"], 4)
