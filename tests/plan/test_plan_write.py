"""`plan --write` puts the knobs that start first time into a new spec that plans as fitting;
vLLM's reserve line says no need when nothing is known to need it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.plan import make_plan
from specpilot.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_plan_write_applies_the_recommended_knobs(tmp_path: Path) -> None:
    given = EXAMPLES / "qwen36-27b-mtp-sglang.toml"
    target = tmp_path / "fits.toml"
    done = CliRunner().invoke(cli, ["plan", str(given), "--write", str(target)])
    assert done.exit_code == 1  # the verdict is on the spec given, which does not fit
    assert (
        "wrote " in done.output and "plans as fitting (88,258 KV tokens, 21 running requests)" in done.output
    )
    written = load_spec(target)
    assert written.engine.args[written.engine.args.index("--mem-fraction-static") + 1] == "0.88"
    assert written.engine.env["SGLANG_ENABLE_SPEC_V2"] == "1"
    assert make_plan(written).fits
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
