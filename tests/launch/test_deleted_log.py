"""A run whose engine.log was deleted: `status` still reports it (from its process), and
`logs` is one line saying the log is gone, exit 2 (both were "unexpected FileNotFoundError")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.cli import commands as registry
from tests.launch.conftest import SpecFactory


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("up", "status", "logs", "down"):
        monkeypatch.setitem(registry.COMMANDS, name, f"specpilot.cli.up:{name}")


def test_status_and_logs_of_a_run_whose_log_was_deleted(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    make_spec("sglang_ready", name="nolog")
    runner = CliRunner()
    started = runner.invoke(cli, ["up", str(tmp_path / "nolog.toml"), "--json", "--force"])
    assert started.exit_code == 0, started.output
    try:
        (tmp_path / "state" / "runs" / "nolog" / "engine.log").unlink()
        status = runner.invoke(cli, ["status", "nolog", "--json"])
        assert status.exit_code == 0, status.output
        assert json.loads(status.stdout)["alive"] is True
        logs = runner.invoke(cli, ["logs", "nolog"])
        assert logs.exit_code == 2, logs.output
        (line,) = logs.output.strip().splitlines()
        assert line.startswith("error: NAME: run nolog's log ") and "is gone" in line
    finally:
        assert runner.invoke(cli, ["down", "nolog"]).exit_code == 0
