"""The vLLM planner against a real vLLM 0.26.0 on the H200 (gpu/run_matrix.sh, run 2026-11-29).

Six starts (gpu/specs/h200-*.toml; logs in tests/data/startup_logs/vllm/h200-*): the
Qwen3.6-27B-shaped hybrid with and without MTP and a dense Qwen3-8B, each at two
utilizations. Targets: KV tokens within 5% from the plan alone, within 3% calibrated
with `--from-log` on the log cut at the weight-loading line, and the printed maximum
concurrency consistent with the planned KV tokens. docs/gpu-validation.md has the table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.types import Plan
from specpilot.plan.vllm.planner import parse_vllm_log
from specpilot.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "data" / "startup_logs" / "vllm"
RUNS = sorted(p.stem.removeprefix("h200-") for p in LOGS.glob("h200-*.json"))
WEIGHTS_LINE = "Model loading took"


def _meta(run: str) -> dict[str, object]:
    meta: dict[str, object] = json.loads((LOGS / f"h200-{run}.json").read_text())
    return meta


def _printed(run: str) -> dict[str, float]:
    printed: dict[str, float] = _meta(run)["printed"]  # type: ignore[assignment]
    return printed


def _plan_alone(run: str) -> Plan:
    return make_plan(resolve(load_spec(REPO / "gpu" / "specs" / f"h200-{run}.toml")))


def _log_up_to_weights(run: str, tmp_path: Path) -> Path:
    """The run's log cut right after "Model loading took": what exists before profiling."""
    lines = (LOGS / f"h200-{run}.log").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if WEIGHTS_LINE in line)
    cut = tmp_path / f"{run}-to-weights.log"
    cut.write_text("".join(lines[: end + 1]))
    return cut


def _plan_calibrated(run: str, tmp_path: Path) -> Plan:
    spec = load_spec(REPO / "gpu" / "specs" / f"h200-{run}.toml")
    calibrated, measured = calibrate_from_log(resolve(spec), _log_up_to_weights(run, tmp_path))
    return make_plan(resolve(calibrated), measured)


def test_the_matrix_is_all_there() -> None:
    assert RUNS == ["dense-80", "dense-96", "hybrid-80", "hybrid-96", "hybrid-mtp-80", "hybrid-mtp-96"]


@pytest.mark.parametrize("run", RUNS)
def test_spec_flags_are_the_logged_run_flags(run: str) -> None:
    spec = load_spec(REPO / "gpu" / "specs" / f"h200-{run}.toml")
    meta = _meta(run)
    assert spec.engine.args == meta["flags"]
    assert spec.gpu.memory_gib == meta["gpu_memory_gib"]


@pytest.mark.parametrize("run", RUNS)
def test_plan_alone_kv_tokens_within_5_percent(run: str) -> None:
    plan = _plan_alone(run)
    printed = _printed(run)
    assert plan.fits
    assert plan.kv_tokens == pytest.approx(printed["kv_tokens"], rel=0.05)
    assert plan.weights_gib == pytest.approx(printed["weights_gib"], rel=0.01)
    available = next(t.gib for t in plan.terms if t.name == "available KV cache memory")
    assert available == pytest.approx(printed["available_kv_gib"], rel=0.05)


@pytest.mark.parametrize("run", RUNS)
def test_calibrated_to_the_weights_line_kv_tokens_within_3_percent(run: str, tmp_path: Path) -> None:
    plan = _plan_calibrated(run, tmp_path)
    printed = _printed(run)
    assert plan.weights_gib == pytest.approx(printed["weights_gib"])  # taken from the cut log
    assert "activation_peak_gib" not in plan.measured  # profiling is after the cut: estimated
    assert plan.kv_tokens == pytest.approx(printed["kv_tokens"], rel=0.03)


@pytest.mark.parametrize("run", RUNS)
def test_max_concurrency_and_block_size_are_consistent(run: str, tmp_path: Path) -> None:
    """vLLM prints KV tokens = int(concurrency x max_model_len); the plan keeps that relation,
    picks the same attention block size, and its concurrency tracks the printed one."""
    printed = _printed(run)
    assert printed["kv_tokens"] == pytest.approx(
        printed["max_concurrency"] * printed["max_model_len"], rel=1e-3
    )
    for plan in (_plan_alone(run), _plan_calibrated(run, tmp_path)):
        concurrency = plan.details.max_concurrency
        assert plan.kv_tokens == pytest.approx(concurrency * plan.details.max_model_len_tokens, rel=1e-3)
        assert concurrency == pytest.approx(printed["max_concurrency"], rel=0.05)
        assert plan.details.attention_block_size_tokens == printed.get("attention_block_size", 16)
        assert plan.max_running_requests == _meta(run)["default_max_num_seqs"]


@pytest.mark.parametrize("run", RUNS)
def test_whole_log_reproduces_the_printed_numbers(run: str) -> None:
    """With the printed "Available KV cache memory" the block arithmetic is exact (0.01 GiB)."""
    spec = load_spec(REPO / "gpu" / "specs" / f"h200-{run}.toml")
    calibrated, measured = calibrate_from_log(resolve(spec), LOGS / f"h200-{run}.log")
    plan = make_plan(resolve(calibrated), measured)
    printed = _printed(run)
    assert plan.kv_tokens == pytest.approx(printed["kv_tokens"], rel=0.002)
    assert plan.details.max_concurrency == pytest.approx(printed["max_concurrency"], abs=0.01)


def test_the_estimated_terms_match_what_profiling_measured() -> None:
    """The H200 calibration of the estimate functions (vllm_memory): peak activation of both
    model runners, with and without a speculative config, and the non-torch increase."""
    for run in RUNS:
        printed = _printed(run)
        terms = {t.name: t.gib for t in _plan_alone(run).terms}
        assert terms["peak activation"] == pytest.approx(printed["activation_peak_gib"], abs=0.05), run
        assert terms["non-torch memory"] == pytest.approx(printed["non_torch_gib"], abs=0.01), run


def test_mtp_cost_on_the_h200_is_planned() -> None:
    """MTP (3 tokens) costs the draft weights, a wider activation peak, 3 extra mamba blocks
    per request and a 17th attention layer: the plan's concurrency ratio tracks the engine's."""
    for budget in ("96", "80"):
        plain, mtp = _printed(f"hybrid-{budget}"), _printed(f"hybrid-mtp-{budget}")
        engine_ratio = mtp["max_concurrency"] / plain["max_concurrency"]
        planned = (
            _plan_alone(f"hybrid-mtp-{budget}").details.max_concurrency
            / _plan_alone(f"hybrid-{budget}").details.max_concurrency
        )
        assert engine_ratio < 0.5
        assert planned == pytest.approx(engine_ratio, rel=0.03)


def test_debug_profiling_lines_alone_give_the_measured_terms() -> None:
    """A log without the final summary line (a start that died allocating the KV cache)
    still yields the free memory and the profiled terms from the DEBUG lines."""
    text = (LOGS / "h200-hybrid-mtp-80.log").read_text()
    without_summary = "".join(
        line for line in text.splitlines(keepends=True) if "Free memory on device" not in line
    )
    parsed = parse_vllm_log(without_summary)
    assert parsed.free_before_load_gib == 139.29
    assert parsed.activation_peak_gib == 7.36
    assert parsed.non_torch_gib == 0.22


@pytest.mark.parametrize("run", RUNS)
def test_weights_are_the_printed_model_loading(run: str) -> None:
    """ "Model loading took" to its two decimals (0.01 GiB): parameters plus the rotary
    cos/sin cache vLLM builds with them (0.125 GiB on the Qwen3.6 shape, 0.01 on Qwen3-8B:
    without it neither would be within 0.01)."""
    assert _plan_alone(run).weights_gib == pytest.approx(_printed(run)["weights_gib"], abs=0.01)


def test_the_rotary_cache_is_read_from_the_config() -> None:
    from specpilot.plan.vllm.planner import rotary_cache_bytes

    model = REPO / "gpu/models/qwen3-8b"
    assert rotary_cache_bytes(model, 128, 2) > 0
    assert rotary_cache_bytes(model / "config.json", 128, 2) == rotary_cache_bytes(model, 128, 2)
    assert rotary_cache_bytes(REPO / "gpu/models/no-such-model", 128, 2) == 0
