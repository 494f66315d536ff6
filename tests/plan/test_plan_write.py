"""`plan --write` puts the knobs that start first time and keep serving into a new spec that
plans as fitting (check's fixes applied first); vLLM's reserve line says no need when nothing is
known to need it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from click.testing import CliRunner

from specpilot.check import check_spec
from specpilot.check.resolved import resolve
from specpilot.cli import cli
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.serving import serving_args, with_serving_args
from specpilot.plan.sglang.serving import state_copy_bound
from specpilot.plan.types import SglangDetails
from specpilot.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_plan_write_applies_the_recommended_knobs(tmp_path: Path) -> None:
    given = EXAMPLES / "qwen36-27b-mtp-sglang.toml"
    target = tmp_path / "fits.toml"
    done = CliRunner().invoke(cli, ["plan", str(given), "--write", str(target)])
    assert done.exit_code == 1  # the verdict is on the spec given, which does not fit
    assert (
        "wrote " in done.output
        and "plans as fitting and safe to serve (88,258 KV tokens, 21 running requests)" in done.output
    )
    written = load_spec(target)
    assert written.engine.args[written.engine.args.index("--mem-fraction-static") + 1] == "0.88"
    assert written.engine.env["SGLANG_ENABLE_SPEC_V2"] == "1"
    assert written.engine.args[written.engine.args.index("--prefill-max-requests") + 1] == "7"
    assert make_plan(resolve(written)).fits
    again = CliRunner().invoke(cli, ["plan", str(given), "--write", str(target)])
    assert (
        again.exit_code == 2
        and "already exists; --write creates a new file and never overwrites" in again.output
    )


def test_a_spec_that_has_the_knobs_already_is_written_unchanged(tmp_path: Path) -> None:
    fitting = EXAMPLES / "qwen36-27b-mtp-sglang-fixed.toml"
    done = CliRunner().invoke(cli, ["plan", str(fitting), "--write", str(tmp_path / "same.toml")])
    assert done.exit_code == 0, done.output
    written, given = load_spec(tmp_path / "same.toml"), load_spec(fitting)
    assert sorted(written.engine.args) == sorted(given.engine.args)  # each knob replaced by itself
    assert written.engine.env == given.engine.env


def test_vllm_reserve_line_names_no_need_it_does_not_know() -> None:
    shown = CliRunner().invoke(cli, ["plan", str(EXAMPLES / "qwen3-8b-vllm.toml")]).output
    (line,) = [line for line in shown.splitlines() if line.startswith("gpu_memory_utilization")]
    assert "reserve 7.92 GiB" in line and "needs" not in line


def test_the_recommendation_bounds_the_state_copies_of_serving() -> None:
    """The fixed incident spec without its prefill bound starts, then runs out of memory when 21
    cached-prefix requests copy their SSM states at once: the recommendation carries the bound."""
    fixed = load_spec(EXAMPLES / "qwen36-27b-mtp-sglang-fixed.toml")
    args = list(fixed.engine.args)
    del args[args.index("--prefill-max-requests") : args.index("--prefill-max-requests") + 2]
    unbounded = fixed.model_copy(update={"engine": fixed.engine.model_copy(update={"args": args})})
    plan = make_plan(resolve(unbounded))
    assert plan.fits and any("out of memory while serving" in note for note in plan.notes)
    assert "--prefill-max-requests" not in plan.recommended_args  # the planner's starting knobs
    served = with_serving_args(resolve(unbounded), plan)
    assert served.recommended_args == [*plan.recommended_args, "--prefill-max-requests", "7"]
    assert "--prefill-max-requests" not in plan.recommended_args  # the plan given stays as it was
    bounded = make_plan(resolve(fixed))
    assert not any("out of memory while serving" in note for note in bounded.notes)
    assert serving_args(resolve(fixed), bounded) == []


def test_plan_prints_the_serving_bound_with_the_starting_knobs() -> None:
    shown = CliRunner().invoke(cli, ["plan", str(EXAMPLES / "qwen36-27b-mtp-sglang.toml")]).output
    lines = shown.splitlines()
    command = lines[lines.index("starts and serves with:") + 1]
    assert command.endswith("--mamba-scheduler-strategy extra_buffer --prefill-max-requests 7")


def test_plan_write_applies_checks_fixes_too(tmp_path: Path) -> None:
    """The incident's second spec (no_buffer, refused at start) becomes a spec that starts and
    serves in one command, where it took check --fix --write, plan --write and plan again."""
    target = tmp_path / "safe.toml"
    done = CliRunner().invoke(
        cli, ["plan", str(EXAMPLES / "qwen36-27b-mtp-nobuffer-sglang.toml"), "--write", str(target)]
    )
    assert done.exit_code == 1, done.output  # the spec given would not have started
    assert done.output.startswith(
        "check's fixes, applied before planning: --mamba-scheduler-strategy extra_buffer; SGLANG_ENABLE_SPEC_V2=1"
    )
    assert "plans as fitting and safe to serve" in done.output
    written = load_spec(target)
    assert check_spec(written).ok
    args = written.engine.args
    assert args[args.index("--mamba-scheduler-strategy") + 1] == "extra_buffer"
    assert args[args.index("--speculative-algorithm") + 1] == "NEXTN"
    assert "--prefill-max-requests" in args
    plan = make_plan(resolve(written))
    assert plan.fits and serving_args(resolve(written), plan) == []


def test_plan_without_write_still_refuses_rejected_flags() -> None:
    done = CliRunner().invoke(cli, ["plan", str(EXAMPLES / "qwen36-27b-mtp-nobuffer-sglang.toml")])
    assert done.exit_code == 2 and "would refuse these flags" in done.output


def test_an_engine_without_a_serving_bound_keeps_its_recommendation() -> None:
    spec = load_spec(EXAMPLES / "qwen3-8b-vllm.toml")
    plan = make_plan(resolve(spec))
    assert with_serving_args(resolve(spec), plan) == plan


def test_the_bound_follows_the_memory_left_after_startup() -> None:
    """144 MiB per copied state: 1.08 GiB holds 7, 0.05 GiB none (then no copies at all), and
    10 GiB all 21 running requests' (no bound needed)."""
    fixed = load_spec(EXAMPLES / "qwen36-27b-mtp-sglang-fixed.toml")
    args = list(fixed.engine.args)
    del args[args.index("--prefill-max-requests") : args.index("--prefill-max-requests") + 2]
    spec = fixed.model_copy(update={"engine": fixed.engine.model_copy(update={"args": args})})
    plan = make_plan(resolve(spec))
    shape, effective = plan_inputs(spec)
    assert isinstance(plan.details, SglangDetails)
    left = {
        gib: dataclasses.replace(plan, details=dataclasses.replace(plan.details, margin_gib=gib))
        for gib in (0.05, 10.0)
    }
    assert state_copy_bound(spec, shape, effective, plan) == ["--prefill-max-requests", "7"]
    assert state_copy_bound(spec, shape, effective, left[0.05]) == ["--disable-radix-cache"]
    assert state_copy_bound(spec, shape, effective, left[10.0]) == []
