"""Every `--json` and result file is strict RFC 8259 JSON: no NaN or Infinity (strict parsers
such as jq and JavaScript's JSON.parse refuse them), a null with its reason instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot import jsontext
from specpilot.cli import cli
from tests.plan.test_startup_peak import H200, _real_start


def strict_loads(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not RFC 8259 JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_become_null_with_a_reason() -> None:
    text = jsontext.dumps({"a": float("inf"), "b": [1.5, float("nan")], "c": {"d": -float("inf")}, "e": 2})
    data = strict_loads(text)
    assert data["a"] is None and data["b"] == [1.5, None] and data["c"] == {"d": None} and data["e"] == 2
    assert set(data["null_reasons"]) == {"a", "b[1]", "c.d"}
    assert "unbounded" in data["null_reasons"]["a"] and "undefined" in data["null_reasons"]["b[1]"]
    assert jsontext.dumps({"a": 1}) == '{"a": 1}'  # nothing added when every number is finite


def test_plan_json_of_a_recorded_start_is_strict(tmp_path: Path) -> None:
    run = "r17-mtp-rec2-96"
    samples = _real_start(tmp_path, run)
    argv = [
        "plan",
        str(H200 / f"{run}.toml"),
        "--from-log",
        str(H200 / f"{run}.log"),
        "--samples",
        str(samples),
    ]
    result = CliRunner().invoke(cli, [*argv, "--json"])
    assert result.exit_code == 0, result.output
    data = strict_loads(result.stdout)
    first = data["startup_peak"]["phases"][0]
    assert first["name"] == "startup" and first["start_s"] <= 0  # the first sample, not -inf
    assert "null_reasons" not in data


@pytest.mark.parametrize("spec", sorted(H200.glob("*.toml"))[:3], ids=lambda p: p.stem)
def test_plan_json_is_strict(spec: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", str(spec), "--json"])
    assert result.exit_code in (0, 1), result.output
    strict_loads(result.stdout)


@pytest.mark.parametrize(
    "argv",
    [["status", "no-such-run"], ["plan", "no-such-spec.toml"], ["plan", "--gpus", "x", "spec.toml"]],
    ids=["status-refusal", "plan-refusal", "usage-error"],
)
def test_a_refusal_under_json_is_one_object_on_stdout(argv: list[str], tmp_path: Path) -> None:
    """The README promises one JSON object on stdout under --json; a refusal left it empty."""
    result = CliRunner(env={"SPECPILOT_HOME": str(tmp_path)}).invoke(cli, [*argv, "--json"])
    assert result.exit_code == 2, result.output
    shown = strict_loads(result.stdout)
    assert set(shown) == {"error", "fix", "exit"} and shown["exit"] == 2 and shown["error"] and shown["fix"]
    assert result.stderr.startswith(("error: ", "Usage:"))  # a person still reads the line


@pytest.mark.parametrize(
    "argv", [["no-such-command"], ["--no-such-option"], []], ids=["command", "option", "json-alone"]
)
def test_a_refusal_of_the_command_line_itself_under_json_points_at_the_command_list(argv: list[str]) -> None:
    """An unknown command's fix was "see `specpilot no-such-command --help`" (no such help); an
    unknown option of specpilot itself printed nothing on stdout."""
    result = CliRunner().invoke(cli, [*argv, "--json"])
    assert result.exit_code == 2, result.output
    shown = strict_loads(result.stdout)
    assert shown["fix"] == "see `specpilot --help`" and shown["exit"] == 2, shown


def test_the_job_record_is_strict_json(tmp_path: Path) -> None:
    from specpilot.job.record import JobRecord

    record = JobRecord(tmp_path / "job.json", {"projection": {"rate": float("inf")}})
    record.save()
    data = strict_loads((tmp_path / "job.json").read_text())
    assert data["projection"]["rate"] is None and "projection.rate" in data["null_reasons"]


def test_ctrl_c_under_json_is_one_object_on_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in a command that takes no signal itself (here as `plan` shows its result) ended
    with the command line's 'interrupted' on stderr and nothing on stdout."""
    from specpilot.cli.output import Output

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Output, "show", interrupted)
    spec = sorted(H200.glob("*.toml"))[0]
    result = CliRunner().invoke(cli, ["plan", str(spec), "--json"])
    assert result.exit_code == 130, result.output
    shown = strict_loads(result.stdout)
    assert shown == {"error": "interrupted", "fix": "run the same command again", "exit": 130}, shown
    assert result.stderr.strip() == "interrupted"
