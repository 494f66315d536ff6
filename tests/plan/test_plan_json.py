"""`Plan.to_json` is an interface users' scripts read; `Plan.from_json` reads it back.

The attributes have engine-neutral names (`memory_fraction`, typed per-engine `details`);
the JSON keeps the keys `plan --json` has always printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.check.resolved import resolve
from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.launch.allocations import plan_diff
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.planners import PLANNERS
from specpilot.plan.types import ENGINE_DETAILS, Plan, SglangDetails, VllmDetails, details_for
from specpilot.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
#: every example the planner accepts (the nobuffer one is refused by check, by design)
EXAMPLES = sorted(p for p in (REPO / "examples").glob("*.toml") if "nobuffer" not in p.name)
SGLANG_H200 = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"

PLAN_KEYS = [
    "engine",
    "engine_version",
    "fits",
    "weights_gib",
    "kv_bytes_per_token",
    "kv_tokens",
    "state_bytes_per_request",
    "state_slots",
    "max_running_requests",
    "mem_fraction_static",
    "reserve_gib",
    "reserve_needed_gib",
    "problems",
    "recommended_args",
    "recommended_env",
    "terms",
    "measured",
    "notes",
    "details",
    "provenance",
    "prefill_gate",
]
DETAILS_KEYS = {
    "sglang": [
        "context_len",
        "page_size",
        "mamba_strategy",
        "overlap_schedule",
        "state_slots_per_request",
        "speculative_num_draft_tokens",
        "mem_fraction_static_given",
        "chunked_prefill_size",
        "cuda_graph_max_bs",
        "free_before_load_gib",
        "margin_gib",
        "largest_transient",
    ],
    "vllm": [
        "attention_block_size",
        "page_bytes",
        "kv_cache_groups",
        "num_blocks",
        "blocks_per_request",
        "max_concurrency",
        "max_model_len",
    ],
}


def _plan_json(spec: Path, *extra: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["plan", str(spec), "--json", *extra])
    assert result.exit_code in (0, 1), result.output
    data: dict[str, object] = json.loads(result.output)
    return data


def test_every_example_is_planned() -> None:
    assert len(EXAMPLES) == 6
    assert {_plan_json(p)["engine"] for p in EXAMPLES} == {"sglang", "vllm"}


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_plan_json_keeps_its_keys_in_order(spec: Path) -> None:
    data = _plan_json(spec)
    assert list(data) == PLAN_KEYS
    details = data["details"]
    assert isinstance(details, dict)
    assert list(details) == DETAILS_KEYS[str(data["engine"])]


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_a_plan_read_back_from_its_json_writes_the_same_json(spec: Path) -> None:
    data = _plan_json(spec)
    plan = Plan.from_json(json.loads(json.dumps(data)))
    assert plan.to_json() == data
    details_type = {"sglang": SglangDetails, "vllm": VllmDetails}[plan.engine]
    assert type(plan.details) is details_type
    assert plan.details == make_plan(resolve(load_spec(spec))).details


def test_a_calibrated_plan_with_problems_and_fixes_round_trips(tmp_path: Path) -> None:
    spec = SGLANG_H200 / "r17-mtp-nobuf-96.toml"
    data = _plan_json(spec, "--from-log", str(spec.with_suffix(".log")))
    assert data["measured"] and data["problems"]  # measured inputs and a fix to carry
    assert Plan.from_json(data).to_json() == data


def test_the_memory_knob_is_named_for_its_engine() -> None:
    sglang = make_plan(resolve(load_spec(REPO / "examples" / "qwen36-27b-mtp-sglang.toml")))
    vllm = make_plan(resolve(load_spec(REPO / "examples" / "qwen36-27b-mtp-vllm.toml")))
    assert (sglang.memory_knob, sglang.memory_fraction) == ("mem_fraction_static", 0.92)
    assert (vllm.memory_knob, vllm.memory_fraction) == ("gpu_memory_utilization", 0.9)
    # the JSON key predates the neutral name and is the same for both engines
    assert vllm.to_json()["mem_fraction_static"] == 0.9
    result = CliRunner().invoke(cli, ["plan", str(REPO / "examples" / "qwen36-27b-mtp-vllm.toml")])
    assert "gpu_memory_utilization 0.900" in result.output


def test_details_carry_units_in_their_names_and_the_json_the_old_keys() -> None:
    plan = make_plan(resolve(load_spec(REPO / "examples" / "qwen36-27b-mtp-vllm.toml")))
    assert isinstance(plan.details, VllmDetails)
    data = plan.to_json()["details"]
    assert data["attention_block_size"] == plan.details.attention_block_size_tokens
    assert data["max_model_len"] == plan.details.max_model_len_tokens == 32768
    assert data["max_concurrency"] == plan.details.max_concurrency == 23.79
    assert VllmDetails.from_json(data) == plan.details


def test_a_stored_plan_compares_with_the_engine_like_the_plan_itself(tmp_path: Path) -> None:
    spec = load_spec(SGLANG_H200 / "r17-mtp-rec-96.toml")
    calibrated, facts = calibrate_from_log(resolve(spec), SGLANG_H200 / "r17-mtp-rec-96.log")
    plan = make_plan(resolve(spec))
    assert facts.weights_gib is not None
    printed = {
        "kv_tokens": float(make_plan(resolve(calibrated), facts).kv_tokens),
        "weights_gib": facts.weights_gib,
    }
    stored = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert plan_diff(printed, stored) == plan_diff(printed, plan)
    assert [d["key"] for d in plan_diff(printed, stored)] == ["kv_tokens", "weights_gib"]


def test_every_planned_engine_has_a_details_record_to_read_its_plan_back() -> None:
    assert {p.engine for p in PLANNERS} == {d.engine for d in ENGINE_DETAILS}
    assert details_for("sglang") is SglangDetails and details_for("vllm") is VllmDetails


def test_a_plan_json_of_an_unknown_engine_is_refused_naming_the_engine() -> None:
    with pytest.raises(UserError, match="no plan details record for engine 'other'"):
        details_for("other")
