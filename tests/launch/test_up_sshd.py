"""The same flows over a real OpenSSH server on 127.0.0.1 (stand-in engines)."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specpilot.hosts import open_host
from specpilot.hosts.base import Host
from specpilot.launch.ops import run_down, run_status
from specpilot.launch.state import read_state
from specpilot.launch.supervisor import UpOptions
from specpilot.spec import Spec
from tests.fixtures.sshd import SshdServer
from tests.fixtures.workers import worker_index
from tests.launch.conftest import SpecFactory
from tests.launch.helpers import group_alive, up

pytestmark = pytest.mark.sshd


@pytest.fixture
def ssh_spec(make_spec: SpecFactory, sshd: SshdServer, run_home: Path) -> Iterator[SpecFactory]:
    """Specs whose [host] is the loopback sshd; their run directories are removed after."""
    made: list[Spec] = []

    def make(scenario: str, **kw: object) -> Spec:
        host = {
            "target": sshd.target,
            "identity_file": sshd.identity_file,
            "known_hosts": sshd.known_hosts,
        }
        # the run directory is on the sshd user's real home, shared by the xdist workers: a
        # name of this worker's own, or two tests of one scenario overwrite each other's run
        name = f"ssh-{scenario.replace('_', '-')}-w{worker_index()}"
        spec = make_spec(scenario, name=name, host=host, **kw)
        made.append(spec)
        return spec

    yield make
    # the sshd logs in as this user, into its real home (not the test's HOME)
    runs = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".specpilot" / "runs"
    for spec in made:
        shutil.rmtree(runs / spec.name, ignore_errors=True)


def ssh_host(sshd: SshdServer) -> Host:
    return open_host(sshd.target, identity_file=sshd.identity_file, known_hosts=sshd.known_hosts)


def test_ready_status_down_over_ssh(ssh_spec: SpecFactory, sshd: SshdServer) -> None:
    spec = ssh_spec("sglang_ready")
    result = up(spec, host=ssh_host(sshd))
    assert (result.phase, result.cause) == ("ready", "ready"), result.error
    assert result.pid is not None
    try:
        state = read_state(spec.name)
        assert state.host.target == sshd.target  # status/down reconnect from the state alone
        status = asyncio.run(run_status(spec.name))
        assert status.alive and status.serving
    finally:
        stopped = asyncio.run(run_down(spec.name, timeout_s=10.0))
    assert stopped["stopped"] == "terminated"
    assert not group_alive(result.pid, host=ssh_host(sshd))


def test_incident_refusal_over_ssh(ssh_spec: SpecFactory, sshd: SshdServer) -> None:
    spec = ssh_spec("sglang_incident_valueerror")
    result = up(spec, host=ssh_host(sshd))
    assert result.cause == "config"
    assert result.fix is not None and result.fix.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert result.pid is not None and not group_alive(result.pid, host=ssh_host(sshd))


def test_altered_file_over_ssh_is_caught(ssh_spec: SpecFactory, sshd: SshdServer) -> None:
    host = ssh_host(sshd)

    async def tamper(remote_dir: str) -> None:
        await host.run(["sed", "-i", "s/--port/--port 1 --x/", f"{remote_dir}/launch.sh"])

    result = up(ssh_spec("sglang_ready"), host=host, options=UpOptions(after_ship=tamper))
    assert result.cause == "mismatch"
    assert result.error is not None and "launch.sh" in result.error
    assert result.pid is None


def test_port_held_over_ssh_names_the_holder(ssh_spec: SpecFactory, sshd: SshdServer) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        spec = ssh_spec("sglang_ready", port=holder.getsockname()[1])
        result = up(spec, host=ssh_host(sshd))
    assert result.cause == "port_in_use"
    assert result.error is not None and "held by pid" in result.error


def test_crash_after_ready_over_ssh_is_reported_by_status(
    ssh_spec: SpecFactory, sshd: SshdServer, tmp_path: Path
) -> None:
    trigger = tmp_path / "crash"  # the loopback host shares this file system
    spec = ssh_spec("vllm_crash_after_ready", engine="vllm", standin={"trigger_file": str(trigger)})
    result = up(spec, host=ssh_host(sshd))
    assert (result.phase, result.cause) == ("ready", "ready"), result.error
    try:
        trigger.touch()
        for _ in range(200):  # a guard while the stand-in prints, not a speed assertion
            status = asyncio.run(run_status(spec.name))
            if status.crash is not None:
                break
            time.sleep(0.05)
        assert status.crash is not None
        assert (status.phase, status.crash.signature) == ("failed", "engine_dead")
        assert read_state(spec.name).cause == "crash"
    finally:
        asyncio.run(run_down(spec.name, timeout_s=10.0))
