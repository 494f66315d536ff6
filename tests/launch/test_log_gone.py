"""A run whose engine.log was deleted after the start: `logs` and `status` say so in one
line instead of crashing; and `down --timeout-s` takes finite numbers only."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.launch.state import RunState, write_state
from specpilot.launch.stop import RUN_TOKEN_VAR
from specpilot.spec import HostSection
from tests.fixtures.engines import wait_exec

TOKEN = "0123456789abcdef"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def engine() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        ["sleep", "60"], start_new_session=True, env={**os.environ, RUN_TOKEN_VAR: TOKEN}
    )
    try:
        wait_exec(process.pid)  # its token is in its environment once the exec is done
        yield process
    finally:
        process.kill()
        process.wait()


def logless_run(home: Path, pid: int, ready_log_bytes: int | None) -> None:
    stat = Path(f"/proc/{pid}/stat").read_text()
    folder = home / "runs" / "logless"
    folder.mkdir(parents=True)
    write_state(
        RunState(
            name="logless",
            host=HostSection(target="local"),
            remote_dir=str(folder),
            log_path=str(folder / "engine.log"),  # never written: as if deleted
            exit_path=str(folder / "exit"),
            pid=pid,
            pgid=pid,
            start_ticks=int(stat[stat.rindex(")") + 2 :].split()[19]),
            run_token=TOKEN,
            endpoint="http://127.0.0.1:9",
            served_model_name=None,
            engine="sglang",
            engine_version="0.5.10",
            argv=("sleep", "60"),
            phase="ready",
            cause="ready",
            started_at_s=time.time(),
            ready_log_bytes=ready_log_bytes,
        )
    )


@pytest.mark.parametrize("ready_log_bytes", [None, 10], ids=["starting", "ready"])
def test_a_deleted_engine_log_is_one_line_not_a_crash(
    run_home: Path, engine: subprocess.Popen[bytes], ready_log_bytes: int | None
) -> None:
    home = run_home.parent / "state"
    logless_run(home, engine.pid, ready_log_bytes)
    status = run("status", "logless")
    assert status.exit_code == 1 and "unexpected" not in status.output
    assert f"pid {engine.pid} alive" in status.output  # the process alone tells, and it runs
    for follow in ([], ["-f"]):
        logs = run("logs", "logless", *follow)
        assert logs.exit_code == 1
        assert logs.output.startswith("error: run logless's engine log ") and "is gone" in logs.output
    assert engine.poll() is None


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_down_timeout_takes_finite_seconds(run_home: Path, value: str) -> None:
    down = run("down", "anything", "--timeout-s", value)
    assert down.exit_code == 2
    assert "Invalid value for '--timeout-s'" in down.output and "script" not in down.output
