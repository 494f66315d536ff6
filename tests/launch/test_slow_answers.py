"""A busy engine or a stalled host is a state or one line, never an internal script:
`status` says "slow to answer (N s)" within its --timeout-s, `logs` gives up in one line,
over the real OpenSSH server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.hosts import open_host
from specpilot.hosts.errors import HostTimeout
from specpilot.launch.ops import run_down
from tests.fixtures.sshd import SshdServer
from tests.fixtures.workers import worker_index
from tests.launch.conftest import SpecFactory
from tests.launch.helpers import up

pytestmark = pytest.mark.sshd


#: the run's folder is in the sshd user's real home, shared by the xdist workers: two tests of
#: this file on two workers once wrote one run folder (a log shorter than the other's offset)
BUSY = f"ssh-busy-w{worker_index()}"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def busy_run(make_spec: SpecFactory, sshd: SshdServer, run_home: Path, tmp_path: Path) -> Iterator[Path]:
    """A ready run over SSH whose engine turns busy once the yielded file exists."""
    busy = tmp_path / "busy"
    host = {"target": sshd.target, "identity_file": sshd.identity_file, "known_hosts": sshd.known_hosts}
    spec = make_spec("sglang_ready", name=BUSY, host=host, standin={"busy_file": str(busy)})
    host_ = open_host(sshd.target, identity_file=sshd.identity_file, known_hosts=sshd.known_hosts)
    result = up(spec, host=host_)
    assert result.phase == "ready", result.error
    try:
        yield busy
    finally:
        busy.unlink(missing_ok=True)
        asyncio.run(run_down(BUSY, timeout_s=5.0))
        # the sshd logs in as this user, into its real home (not the test's HOME)
        shutil.rmtree(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".specpilot" / "runs" / BUSY, True)


def test_status_of_a_busy_engine_is_slow_to_answer(busy_run: Path) -> None:
    assert json.loads(run("status", BUSY, "--json").output)["endpoint_state"] == "200"
    busy_run.touch()
    found = run("status", BUSY, "--json", "--timeout-s", "1")
    assert found.exit_code == 1  # not serving within the timeout
    status = json.loads(found.stdout)
    assert (status["alive"], status["endpoint_status"]) == (True, None)
    assert status["endpoint_state"] == "slow to answer (1 s)"
    human = run("status", BUSY, "--timeout-s", "1")
    assert human.exit_code == 1
    assert "slow to answer (1 s)" in human.output and "error" not in human.output


def test_logs_from_a_stalled_host_give_up_in_one_line(busy_run: Path, sshd: SshdServer) -> None:
    assert "fired up and ready to roll" in run("logs", BUSY).output
    os.kill(sshd.pid, signal.SIGSTOP)  # the host accepts the connection and says nothing more
    try:
        stalled = run("logs", BUSY, "--timeout-s", "1")
    finally:
        os.kill(sshd.pid, signal.SIGCONT)
    assert stalled.exit_code == 1
    (line,) = stalled.stderr.strip().splitlines()
    assert line.startswith(f"error: {sshd.target} was slow to answer (1 s) reading ")
    assert line.endswith("engine.log; try again, or raise --timeout-s if the host is busy")


def test_a_timed_out_script_is_named_by_its_size_not_printed(sshd: SshdServer) -> None:
    async def go() -> str:
        host = open_host(sshd.target, identity_file=sshd.identity_file, known_hosts=sshd.known_hosts)
        try:
            await host.run(["python3", "-c", "import time\ntime.sleep(60)\n"], timeout_s=0.5)
        except HostTimeout as err:
            return str(err)
        finally:
            await host.close()
        raise AssertionError("the script did not time out")

    said = asyncio.run(go())
    assert said.startswith("run python3 -c <2-line script> on ssh://") and "sleep" not in said


@pytest.mark.parametrize("command", ["status", "logs"])
@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_timeout_that_cannot_be_waited_is_refused(command: str, value: str, run_home: Path) -> None:
    refused = run(command, "any-run", "--timeout-s", value)
    assert refused.exit_code == 2
    # click's usage error: one line naming the option and what it takes
    assert refused.output.strip().splitlines()[-1].startswith("Error: Invalid value for '--timeout-s': ")
