"""The SGLang planner against numbers real engines printed at startup.

Each case in tests/data/startup_logs/sglang/ is a published log excerpt plus a JSON
file with its source, model config, GPU, flags, release and printed numbers. The plan
is made with the log's own calibration inputs (free memory before load and weight
memory, both read from the log by `parse_sglang_log`), as `specpilot plan --from-log`
does, and must reproduce the engine's allocation within each case's stated tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpilot.plan import plan_inputs
from specpilot.plan.sglang.log import parse_sglang_log
from specpilot.plan.sglang.planner import plan_sglang
from specpilot.plan.types import Plan
from specpilot.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "startup_logs" / "sglang"
CASES = sorted(p.stem for p in LOGS.glob("*.json"))


def _case(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((LOGS / f"{name}.json").read_text())
    return data


def _plan(case: dict[str, Any], calibrated: bool) -> Plan:
    model: dict[str, Any] = {"path": str(ROOT / case["config"]), "dtype": case["model_dtype"]}
    if case["quantization"]:
        model["quantization"] = case["quantization"]
    gpu: dict[str, Any] = {"memory_gib": case["gpu_memory_gib"], "count": case["tp"]}
    if calibrated and case["calibration"]:
        model["weights_gib"] = case["calibration"]["weights_gib"]
        gpu["free_before_load_gib"] = case["calibration"]["free_before_load_gib"]
    spec = parse_spec(
        {
            "name": "log-case",
            "model": model,
            "gpu": gpu,
            "engine": {
                "name": "sglang",
                "version": case["version"],
                "args": case["args"],
                "env": case["env"],
            },
        }
    )
    shape, args = plan_inputs(spec)
    return plan_sglang(spec, shape, args)


def test_every_case_has_its_log_and_a_source() -> None:
    assert len(CASES) >= 5
    for name in CASES:
        assert (LOGS / f"{name}.log").is_file(), name
        assert _case(name)["source"], name


@pytest.mark.parametrize("name", CASES)
def test_calibration_inputs_are_what_the_log_prints(name: str) -> None:
    case = _case(name)
    if not case["calibration"]:
        pytest.skip("the source quotes no load line")
    parsed = parse_sglang_log((LOGS / f"{name}.log").read_text())
    assert parsed.weights_gib == case["calibration"]["weights_gib"]
    assert parsed.free_before_load_gib == pytest.approx(
        case["calibration"]["free_before_load_gib"], abs=0.005
    )


@pytest.mark.parametrize("name", CASES)
def test_kv_tokens_match_the_engine(name: str) -> None:
    case = _case(name)
    tolerance = case["expect"].get("kv_tokens_rel_tol")
    if tolerance is None:
        pytest.skip(case["expect"].get("why_no_kv_check", "the log prints no KV line"))
    plan = _plan(case, calibrated=True)
    assert plan.kv_tokens == pytest.approx(case["printed"]["kv_tokens"], rel=tolerance)


@pytest.mark.parametrize("name", CASES)
def test_state_slots_match_the_engine(name: str) -> None:
    case = _case(name)
    tolerance = case["expect"].get("state_slots_rel_tol")
    if tolerance is None:
        pytest.skip("the log prints no mamba pool line or the slots are set by a flag")
    plan = _plan(case, calibrated=True)
    assert plan.state_slots == pytest.approx(case["printed"]["max_mamba_cache_size"], rel=tolerance)


@pytest.mark.parametrize("name", CASES)
def test_max_running_requests_match_the_engine(name: str) -> None:
    case = _case(name)
    plan = _plan(case, calibrated=True)
    tolerance = case["expect"]["max_running_requests_abs_tol"]
    assert abs(plan.max_running_requests - case["printed"]["max_running_requests"]) <= tolerance


def test_explicit_state_slots_are_taken_as_given() -> None:
    plan = _plan(_case("rtxpro6000-mamba40-spec"), calibrated=False)
    assert plan.state_slots == 40


@pytest.mark.parametrize("name", ["h100-qwen3.8-27b-fp8", "rtx4090x4-qwen3-14b-tp4"])
def test_uncalibrated_plan_is_within_five_percent(name: str) -> None:
    """From config.json and the GPU size alone (estimated weights and CUDA context)."""
    case = _case(name)
    plan = _plan(case, calibrated=False)
    assert plan.kv_tokens == pytest.approx(case["printed"]["kv_tokens"], rel=0.05)
