"""`up` and calibration read a startup log the same way (one declaration per quantity).

The named bug: with speculative decoding SGLang prints a second "Load weight end" line
for the draft model; `up` took the last one and warned the weights were ~89% below the
plan. Real MTP starts on an H200 (tests/data/startup_logs/sglang-h200/) print both lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.engines.registry import engine_by_name
from specpilot.launch.allocations import REPORTED, plan_diff
from specpilot.launch.classify import LogClassifier
from specpilot.plan import make_plan
from specpilot.plan.sglang.log import parse_sglang_log
from specpilot.plan.vllm.log import parse_vllm_log
from specpilot.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "data" / "startup_logs"
SGLANG_H200 = LOGS / "sglang-h200"
ALL_LOGS = sorted(LOGS.glob("*/*.log"))
#: MTP starts that loaded both models (a start that failed before the draft loaded has one line)
SPECULATIVE = sorted(
    p.stem for p in SGLANG_H200.glob("*-mtp*.log") if p.read_text().count("Load weight end.") == 2
)


def _engine(log: Path) -> str:
    return "vllm" if log.parent.name == "vllm" else "sglang"


def _up_reads(engine: str, text: str) -> dict[str, int | float]:
    classifier = LogClassifier(engine_by_name(engine))
    for line in text.splitlines():
        classifier.feed(line)
    return classifier.allocations


def test_the_speculative_logs_are_there() -> None:
    assert len(SPECULATIVE) >= 10


@pytest.mark.parametrize("run", SPECULATIVE)
def test_up_compares_the_targets_weights_not_the_drafts(run: str) -> None:
    text = (SGLANG_H200 / f"{run}.log").read_text()
    target, draft = (
        float(line.split("mem usage=")[1].split(" GB")[0])
        for line in text.splitlines()
        if "Load weight end." in line
    )
    assert draft < target / 2  # the draft's line really is a different number
    plan = make_plan(resolve(load_spec(SGLANG_H200 / f"{run}.toml")))
    diffs = {d["key"]: d for d in plan_diff(_up_reads("sglang", text), plan)}
    assert diffs["weights_gib"]["engine"] == target
    assert not diffs["weights_gib"]["warn"], diffs["weights_gib"]


def test_a_vllm_speculative_start_prints_one_weight_line_for_target_and_drafter() -> None:
    text = (LOGS / "vllm" / "h200-hybrid-mtp-96.log").read_text()
    assert (
        "--speculative-config" in json.loads((LOGS / "vllm" / "h200-hybrid-mtp-96.json").read_text())["flags"]
    )
    plan = make_plan(resolve(load_spec(REPO / "gpu" / "specs" / "h200-hybrid-mtp-96.toml")))
    diffs = {d["key"]: d for d in plan_diff(_up_reads("vllm", text), plan)}
    assert diffs["weights_gib"]["engine"] == parse_vllm_log(text).weights_gib
    assert not any(d["warn"] for d in diffs.values()), diffs


@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_up_and_calibration_agree_on_every_shared_quantity(log: Path) -> None:
    text = log.read_text(errors="replace")
    engine = _engine(log)
    calibration = parse_sglang_log(text) if engine == "sglang" else parse_vllm_log(text)
    up = _up_reads(engine, text)
    shared = {name: getattr(calibration, key) for name, key in REPORTED.items()}
    shared = {name: value for name, value in shared.items() if value is not None}
    assert up == shared
