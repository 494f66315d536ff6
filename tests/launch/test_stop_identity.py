"""`down` and `status` trust the recorded pid only while it is still the run's process,
and `down` says every way a stop can end."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.launch.identity import recorded_process
from specpilot.launch.ops import run_down, run_status
from specpilot.launch.state import RunState, write_state
from specpilot.launch.stop import _GROUP_SCRIPT, RUN_TOKEN_VAR, STOP_OUTCOMES
from tests.fixtures.engines import wait_exec
from tests.fixtures.memory_host import launch_host
from tests.launch.helpers import ready_state

ENGINE_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--port", "30000"]


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


@pytest.fixture
def unrelated() -> Iterator[subprocess.Popen[bytes]]:
    """Someone else's process leading its own group: what a recycled pid points at."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        wait_exec(process.pid)  # a recycled pid's process has its argv
        yield process
    finally:
        process.kill()
        process.wait()


def stale_state(
    name: str, pid: int, run_home: Path, start_ticks: int | None = None, run_token: str | None = None
) -> None:
    """A ready run whose engine is gone and whose pid the kernel gave to `pid`."""
    run_dir = run_home / ".specpilot" / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "engine.log").write_text("The server is fired up and ready to roll!\n")
    write_state(engine_state(name, pid, run_dir, start_ticks, run_token))


def engine_state(
    name: str, pid: int, run_dir: Path, start_ticks: int | None, run_token: str | None = None
) -> RunState:
    """A ready run of ENGINE_ARGV, pid `pid`, recorded with `start_ticks` (and `run_token`)."""
    return ready_state(
        name,
        remote_dir=str(run_dir),
        log_path=str(run_dir / "engine.log"),
        exit_path=str(run_dir / "exit"),
        pid=pid,
        pgid=pid,
        start_ticks=start_ticks,
        run_token=run_token,
        argv=tuple(ENGINE_ARGV),
        endpoint="http://127.0.0.1:9",
        served_model_name=None,
        engine_version="0.5.10",
        started_at_s=time.time() - 60,
        allocations={},
        ready_log_bytes=None,
    )


@pytest.mark.parametrize(
    "start_time_recorded", [True, False], ids=["by-start-time", "by-argv-when-no-start-time-was-recorded"]
)
def test_a_recycled_pid_is_neither_alive_nor_signalled(
    run_home: Path, unrelated: subprocess.Popen[bytes], start_time_recorded: bool
) -> None:
    # the run's engine started before the process that holds its pid now
    recorded = start_ticks(unrelated.pid) - 1 if start_time_recorded else None
    stale_state("stale", unrelated.pid, run_home, start_ticks=recorded)
    status = asyncio.run(run_status("stale"))
    assert (status.alive, status.pid_reused, status.phase) == (False, True, "exited")
    assert not status.serving
    stopped = asyncio.run(run_down("stale", timeout_s=1.0))
    assert stopped["stopped"] == "stale"
    assert unrelated.poll() is None  # the unrelated process was not signalled
    assert os.getpgid(unrelated.pid) == unrelated.pid


@pytest.mark.parametrize(("alive", "expected"), [(True, "reused"), (False, "exited")])
def test_a_process_without_an_argv_yet_is_neither_gone_nor_the_run_s(
    tmp_path: Path, alive: bool, expected: str
) -> None:
    """A record without a start time is checked by argv, and /proc/PID/cmdline reads empty
    both for a zombie and for a live process between exec's start and its arguments."""
    host = launch_host()
    process = host.add_process([], alive=alive)
    state = engine_state("noargv", process.pid, tmp_path, start_ticks=None)
    assert asyncio.run(recorded_process(host, state)) == expected


def test_the_run_s_own_process_is_recognised_and_stopped(run_home: Path) -> None:
    own = subprocess.Popen(["sleep", "60"], start_new_session=True, env={**os.environ, RUN_TOKEN_VAR: "t0"})
    try:
        wait_exec(own.pid)  # its token is in its environment once the exec is done
        stale_state("own", own.pid, run_home, start_ticks=start_ticks(own.pid), run_token="t0")
        assert asyncio.run(run_status("own")).alive
        assert asyncio.run(run_down("own", timeout_s=5.0))["stopped"] == "terminated"
        assert own.wait(timeout=10) == -signal.SIGTERM
    finally:
        if own.poll() is None:
            own.kill()
            own.wait()


@pytest.mark.parametrize("outcome", sorted(STOP_OUTCOMES))
def test_down_says_every_outcome(outcome: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake_run_down(name: str, *, timeout_s: float) -> dict[str, Any]:
        phase = "stop_failed" if outcome == "survived" else "stopped"
        survivors = [4243] if outcome == "survived" else []
        return {"name": name, "pid": 4242, "phase": phase, "stopped": outcome, "survivors": survivors}

    monkeypatch.setattr("specpilot.cli.up.run_down", fake_run_down)
    result = CliRunner().invoke(cli, ["down", "some-run"], catch_exceptions=False)
    assert result.output.startswith("some-run: process group 4242 ")
    assert STOP_OUTCOMES[outcome].split(":")[0].replace("PGID", "4242") in result.output
    assert ("some-run: still alive: pid 4243" in result.output) == (outcome == "survived")
    assert result.exit_code == (1 if outcome in ("survived", "unproven") else 0)


def test_outcomes_cover_what_the_stop_script_can_print() -> None:
    printed = set()
    for line in _GROUP_SCRIPT.splitlines():
        if "report(" in line and '"' in line:
            printed |= {part for part in line.split('"')[1::2] if part.replace("_", "").isalpha()}
    assert printed == set(STOP_OUTCOMES)
