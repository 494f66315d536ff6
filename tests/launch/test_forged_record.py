"""A run record forged onto another process's pid and start time: where the process's
environment can be read, the run's token must be there too. Without it the record is
`unproven`: `status` does not report the process as the live run and `down` (the job's down
stage runs the same stop) never signals it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.launch.state import write_state
from specpilot.launch.stop import RUN_TOKEN_VAR
from tests.fixtures.engines import wait_exec
from tests.launch.test_stop_identity import engine_state, start_ticks

TOKEN = "0123456789abcdef0123456789abcdef"


def _sleep(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"], start_new_session=True, env={**os.environ, **env})
    try:
        wait_exec(process.pid)
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def foreign() -> Iterator[subprocess.Popen[bytes]]:
    """Someone's process, with an environment of its own (no run's token in it)."""
    yield from _sleep({})


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    """A process holding the run's token: what `up` starts."""
    yield from _sleep({RUN_TOKEN_VAR: TOKEN})


def record(name: str, process: subprocess.Popen[bytes], run_home: Path, token: str | None) -> None:
    run_dir = run_home / ".specpilot" / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "engine.log").write_text("The server is fired up and ready to roll!\n")
    write_state(engine_state(name, process.pid, run_dir, start_ticks(process.pid), token))


@pytest.mark.parametrize("token", [TOKEN, None], ids=["a-forged-token", "no-token"])
def test_a_record_forged_onto_a_foreign_process_is_unproven(
    run_home: Path, foreign: subprocess.Popen[bytes], token: str | None
) -> None:
    record("forged", foreign, run_home, token)
    status = CliRunner().invoke(cli, ["status", "forged", "--json"], catch_exceptions=False)
    shown = json.loads(status.stdout)
    assert shown["phase"] == "unproven" and shown["alive"] is False, status.output
    said = CliRunner().invoke(cli, ["status", "forged"], catch_exceptions=False).output
    assert f"pid {foreign.pid} not provably the run's" in said and "not running" not in said, said
    down = CliRunner().invoke(cli, ["down", "forged", "--json"], catch_exceptions=False)
    assert json.loads(down.stdout)["stopped"] == "unproven", down.output
    assert foreign.poll() is None  # never signalled
    assert json.loads(down.stdout)["signalled"] == []


def test_the_run_holding_its_token_is_still_the_run(run_home: Path, holder: subprocess.Popen[bytes]) -> None:
    record("own", holder, run_home, TOKEN)
    status = CliRunner().invoke(cli, ["status", "own", "--json"], catch_exceptions=False)
    assert json.loads(status.stdout)["alive"] is True, status.output
    down = CliRunner().invoke(cli, ["down", "own", "--json"], catch_exceptions=False)
    assert json.loads(down.stdout)["stopped"] == "terminated", down.output
    assert holder.wait(timeout=30) is not None


def test_down_names_what_it_stopped_not_the_process_the_record_names(
    run_home: Path, foreign: subprocess.Popen[bytes], holder: subprocess.Popen[bytes]
) -> None:
    """The record forged onto someone's process, the run's own (its token) elsewhere: `down`
    stops the run's own and said 'process group FOREIGN stopped'."""
    record("moved", foreign, run_home, TOKEN)
    down = CliRunner().invoke(cli, ["down", "moved"], catch_exceptions=False)
    assert holder.wait(timeout=30) is not None and foreign.poll() is None
    assert f"moved: pid {holder.pid} stopped" in down.output, down.output
    assert f"process group {foreign.pid} stopped" not in down.output
    assert f"not signalled (not provably the run's): pid {foreign.pid}" in down.output
