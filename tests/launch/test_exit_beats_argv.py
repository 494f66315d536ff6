"""A fast-dying engine under a parent that does not reap (PID 1 of many containers):
classified from its log, never as a mismatch, with its exit status when the host knows it.

The stand-in can SIGKILL its launch watcher before it ends (the stand-in config's `orphan`), so
the non-reaping parent adopts it and it ends a zombie whose cmdline reads empty: the
case that used to be diagnosed "mismatch" by chance.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from specpilot.hosts import Host, open_host
from specpilot.hosts.base import ProcStat
from specpilot.launch.ops import run_status
from specpilot.launch.verify import check_live, running, wait_for_argv
from tests.fixtures.sshd import SshdServer, start_sshd, stop_sshd
from tests.launch.conftest import FAKES, SpecFactory
from tests.launch.helpers import up

ROOT = Path(__file__).resolve().parents[2]
NON_REAPING_PARENT = [sys.executable, str(FAKES / "nonreaping_parent.py")]
SCENARIO = "sglang_incident_valueerror"  # prints the incident's ValueError, exits 1


def proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def up_under_non_reaping_parent(spec_path: Path) -> tuple[dict[str, object], list[int]]:
    """`specpilot up --json` as a child of the non-reaping parent: its JSON and the
    zombies the parent held when `up` returned."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [*NON_REAPING_PARENT, sys.executable, "-m", "specpilot", "up", str(spec_path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    *result_lines, zombies_line = done.stdout.strip().splitlines()
    assert done.returncode == 1, done.stderr
    return json.loads("\n".join(result_lines)), json.loads(zombies_line)["zombies"]


@pytest.mark.parametrize("orphan", [True, False], ids=["zombie", "reaped-by-its-watcher"])
def test_local_fast_exit_is_its_logged_cause_never_a_mismatch(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, orphan: bool
) -> None:
    spec = make_spec(SCENARIO, name="exit-local", standin={"orphan": orphan})
    assert spec.source_path is not None
    result, zombies = up_under_non_reaping_parent(spec.source_path)
    assert (result["phase"], result["cause"]) == ("failed", "config")
    assert "is not compatible with radix cache" in str(result["error"])
    if orphan:
        assert result["pid"] in zombies  # the zombie case really ran
        assert result["exit_status"] is None  # its parent never reaped it: nobody can know
    else:
        assert result["pid"] not in zombies
        assert result["exit_status"] == 1
        status = asyncio.run(run_status("exit-local"))  # from a new shell: the watcher's record
        assert (status.alive, status.exit_status) == (False, 1)


@pytest.fixture
def non_reaping_sshd(tmp_path: Path) -> Iterator[SshdServer]:
    """A loopback sshd whose sessions' orphans go to a parent that never reaps them."""
    server = start_sshd(tmp_path / "sshd", wrapper=NON_REAPING_PARENT)
    try:
        yield server
    finally:
        stop_sshd(server)


@pytest.mark.sshd
@pytest.mark.parametrize("orphan", [True, False], ids=["zombie", "reaped-by-its-watcher"])
def test_ssh_fast_exit_is_its_logged_cause_never_a_mismatch(
    make_spec: SpecFactory, run_home: Path, non_reaping_sshd: SshdServer, orphan: bool
) -> None:
    server = non_reaping_sshd
    host = {"target": server.target, "identity_file": server.identity_file, "known_hosts": server.known_hosts}
    spec = make_spec(SCENARIO, name=f"exit-ssh-{orphan}".lower(), standin={"orphan": orphan}, host=host)
    ssh = open_host(server.target, identity_file=server.identity_file, known_hosts=server.known_hosts)
    result = up(spec, host=ssh)
    assert (result.phase, result.cause) == ("failed", "config"), result.error
    assert result.error is not None and "is not compatible with radix cache" in result.error
    assert result.pid is not None
    if orphan:
        assert proc_state(result.pid) == ("Z", server.pid)  # a zombie of the non-reaping parent
        assert result.exit_status is None
    else:
        assert proc_state(result.pid) is None
        assert result.exit_status == 1


def test_a_zombie_is_exited_for_the_verifier_not_a_mismatch() -> None:
    """The verifier's own view of a zombie (cmdline reads empty): gone, not different."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while proc_state(child.pid) != ("Z", os.getpid()):  # exited, not yet reaped by us
        time.sleep(0.01)
    planned = ["python3", "-m", "sglang.launch_server", "--port", "30000"]

    async def verdicts() -> tuple[object, ...]:
        host = open_host("local")
        try:
            return (
                await check_live(host, child.pid, planned, {"PATH": "/usr/bin"}),
                await wait_for_argv(host, child.pid, planned, ["bash", "launch.sh"], timeout_s=0.1),
                await running(host, child.pid),
            )
        finally:
            await host.close()

    try:
        assert asyncio.run(verdicts()) == (None, None, False)
    finally:
        child.wait()


class _ExecingHost:
    """A process in the middle of an exec: its cmdline reads empty `empty_reads` times while it
    runs, then shows `argv`."""

    def __init__(self, argv: list[str], empty_reads: int) -> None:
        self.argv, self.empty_reads = argv, empty_reads

    async def proc_argv(self, pid: int) -> list[str]:
        if self.empty_reads:
            self.empty_reads -= 1
            return []
        return self.argv

    async def proc_stat(self, pid: int) -> ProcStat:
        return ProcStat(state="R", pgid=pid, start_ticks=1)


def test_a_process_mid_exec_is_waited_for_not_taken_for_gone() -> None:
    """A wrapper that re-execs reads empty for a moment while it runs: the verifier waits for
    its argv (before, it stopped verifying, the start was never proven and ended as a timeout)."""
    planned = ["python3", "-m", "sglang.launch_server", "--port", "30000"]
    host = cast(Host, _ExecingHost(planned, empty_reads=3))
    found = asyncio.run(wait_for_argv(host, 4242, planned, ["bash", "launch.sh"], timeout_s=30.0, poll_s=0.0))
    assert found == planned
