"""The four commands as a user runs them: JSON shapes, exit codes, state across invocations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.cli import commands as registry
from specpilot.hosts.memory import MemoryHost
from specpilot.launch.state import write_state
from specpilot.spec import HostSection
from tests.launch.conftest import SpecFactory
from tests.launch.helpers import ready_state

UP_KEYS = {
    "name",
    "phase",
    "cause",
    "error",
    "fix",
    "pid",
    "endpoint",
    "allocations",
    "plan_diff",
    "elapsed_s",
}


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands as specpilot.cli.commands registers them."""
    for name in ("up", "status", "logs", "down"):
        monkeypatch.setitem(registry.COMMANDS, name, f"specpilot.cli.up:{name}")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def spec_file(spec_name: str, tmp_path: Path) -> str:
    return str(next(tmp_path.glob(f"{spec_name}.toml")))


def test_up_status_logs_down_json(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, memory_host: MemoryHost
) -> None:
    spec = make_spec("sglang_ready", name="cli-ok")
    started = run("up", spec_file("cli-ok", tmp_path), "--json")
    try:
        assert started.exit_code == 0, started.output
        result = json.loads(started.stdout)
        assert set(result) >= UP_KEYS
        assert (result["phase"], result["cause"], result["error"]) == ("ready", "ready", None)
        assert result["allocations"]["kv_tokens"] == 295950
        assert {d["key"] for d in result["plan_diff"]} >= {"kv_tokens"}  # plan ran first

        status = run("status", "cli-ok", "--json")
        assert status.exit_code == 0
        assert json.loads(status.stdout)["endpoint_status"] == 200

        logs = run("logs", spec.name)
        assert "The server is fired up and ready to roll!" in logs.output

        again = run("up", spec_file("cli-ok", tmp_path))
        assert again.exit_code == 2 and "already running" in again.output
    finally:
        down = run("down", spec.name, "--json")
    assert down.exit_code == 0 and json.loads(down.stdout)["stopped"] == "terminated"
    after = run("status", spec.name, "--json")
    assert after.exit_code == 1 and json.loads(after.stdout)["phase"] == "stopped"


def test_up_failure_json_has_cause_error_fix_and_exit_1(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, memory_host: MemoryHost
) -> None:
    make_spec("sglang_incident_valueerror", name="cli-incident")
    failed = run("up", spec_file("cli-incident", tmp_path), "--json")
    assert failed.exit_code == 1
    result = json.loads(failed.stdout)
    assert (result["phase"], result["cause"]) == ("failed", "config")
    assert result["error"].startswith("Traceback (most recent call last):")
    assert result["fix"]["env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}
    followed = run("logs", "cli-incident", "-f")  # the engine is gone: prints all, returns
    assert followed.exit_code == 0 and "ValueError: Speculative decoding" in followed.output


def test_human_failure_output_names_cause_error_and_fix(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, memory_host: MemoryHost
) -> None:
    make_spec("vllm_unrecognized_args", engine="vllm", name="cli-badargs")
    failed = run("up", spec_file("cli-badargs", tmp_path))
    assert failed.exit_code == 1
    assert "failed: bad_args" in failed.output
    assert "unrecognized arguments: --mamba-scheduler-strategy" in failed.output
    assert "nothing left running" in failed.output


def test_plan_that_does_not_fit_refuses_unless_forced(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, memory_host: MemoryHost
) -> None:
    make_spec("sglang_incident_valueerror", name="cli-nofit", gpu_memory_gib=0.05)
    refused = run("up", spec_file("cli-nofit", tmp_path), "--json")
    assert refused.exit_code == 1
    result = json.loads(refused.stdout)
    assert (result["phase"], result["cause"], result["pid"]) == ("refused", "oom", None)
    assert "--force" in result["error"]
    human = run("up", spec_file("cli-nofit", tmp_path))
    assert human.exit_code == 1
    assert "refused before start: oom; nothing was started" in human.output
    assert "the plan does not fit" in human.output  # the reason is printed too
    assert "failed" not in human.output and "after 0.0 s" not in human.output
    forced = run("up", spec_file("cli-nofit", tmp_path), "--json", "--force")
    assert json.loads(forced.stdout)["cause"] == "config"  # it started, and the engine refused


def test_bad_input_exits_2(run_home: Path, tmp_path: Path) -> None:
    assert run("up", str(tmp_path / "missing.toml")).exit_code == 2
    assert run("status", "no-such-run").exit_code == 2
    assert run("down", "../etc").exit_code == 2


def test_runs_lists_phase_endpoint_and_age(make_spec: SpecFactory, run_home: Path, tmp_path: Path) -> None:
    assert json.loads(run("runs", "--json").output) == []
    assert "no runs yet" in run("runs").output
    make_spec("sglang_ready", name="listed")
    started = run("up", spec_file("listed", tmp_path), "--json")
    try:
        assert started.exit_code == 0, started.output
        listed = json.loads(run("runs", "--json").output)
        assert [(r["name"], r["phase"], r["target"]) for r in listed] == [("listed", "ready", "local")]
        assert listed[0]["endpoint"] == json.loads(started.stdout)["endpoint"]
        assert listed[0]["age_s"] >= 0
        table = run("runs").output
        assert "listed" in table and "ready" in table
    finally:
        run("down", "listed")
    assert json.loads(run("runs", "--json").output)[0]["phase"] == "stopped"


def test_runs_shows_a_vanished_local_process_as_exited(run_home: Path) -> None:
    # 2**22 + 7 is above the kernel's largest pid (pid_max <= 2**22): no such process
    write_state(ready_state("gone", pid=2**22 + 7, started_at_s=0.0))
    write_state(ready_state("far", host=HostSection(target="ssh://gpu@10.0.0.9"), pid=2**22 + 7))
    listed = {r["name"]: r for r in json.loads(run("runs", "--json").output)}
    assert listed["gone"]["phase"] == "exited"
    assert listed["far"]["phase"] == "ready"  # a remote run keeps its recorded phase
