"""The MemoryHost (specpilot.hosts.memory, with launch's scripts: tests/fixtures/memory_host.py)
answers as the real LocalHost does, for what the tests above the host ask of it: shipping and
re-verifying run files, the exec'd argv of a launch script, and which processes a stop proves
the run's and how the stop ends."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from specpilot.hosts import LocalHost
from specpilot.hosts.base import Host
from specpilot.hosts.memory import MemoryHost
from specpilot.launch.render import render_launch_script
from specpilot.launch.rundir import RunFiles, ship, verify_on_host
from specpilot.launch.stop import RunProcesses, end_group, run_members
from tests.fixtures.engines import wait_exec
from tests.fixtures.memory_host import launch_host

FILES = RunFiles(spec_toml=b'name = "m"\n', plan_json=b"{}\n", launch_sh=b"exec true\n", env=b"A=1\n")


def _shipped_then_tampered(host: Host, folder: str) -> tuple[list[str], list[str]]:
    async def go() -> tuple[list[str], list[str]]:
        await ship(host, folder, FILES, b"{}\n")
        clean = await verify_on_host(host, folder, FILES)
        await host.put(f"{folder}/env", b"A=2\n", 0o600)
        return clean, await verify_on_host(host, folder, FILES)

    return asyncio.run(go())


def test_verification_finds_the_same_change_on_both(tmp_path: Path) -> None:
    local_clean, local_changed = _shipped_then_tampered(LocalHost(), str(tmp_path))
    memory_clean, memory_changed = _shipped_then_tampered(MemoryHost(), "/home/u/run")
    assert local_clean == memory_clean == []
    assert [line.replace(str(tmp_path), "DIR") for line in local_changed] == [
        line.replace("/home/u/run", "DIR") for line in memory_changed
    ]
    assert len(local_changed) == 1 and "DIR/env: sha256 on the host is" in local_changed[0].replace(
        str(tmp_path), "DIR"
    )


def _spawned_argv(host: Host, folder: str) -> list[str] | None:
    argv = ["sleep", "30"]

    async def go() -> list[str] | None:
        await host.put(f"{folder}/launch.sh", render_launch_script(argv), 0o700)
        pid = await host.spawn_detached(
            ["bash", f"{folder}/launch.sh"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=folder,
            log_path=f"{folder}/engine.log",
            pid_path=f"{folder}/pid",
            exit_path=f"{folder}/exit",
        )
        for _ in range(100):  # bash execs: the argv changes once it has
            live = await host.proc_argv(pid)
            if live == argv:
                break
            await asyncio.sleep(0.02)
        await end_group(
            host, pid, term_timeout_s=5.0, start_ticks=(await host.proc_stat(pid) or _none()).start_ticks
        )
        return live

    return asyncio.run(go())


def _none() -> object:
    raise AssertionError("the process was gone before its stat was read")


def test_a_launch_script_runs_as_its_exec_line_on_both(tmp_path: Path) -> None:
    assert (
        _spawned_argv(LocalHost(), str(tmp_path))
        == _spawned_argv(launch_host(), "/home/u/run")
        == ["sleep", "30"]
    )


@pytest.fixture
def real_group() -> Iterator[int]:
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    wait_exec(process.pid)  # a group of a running `sleep`, not of Python mid-exec
    try:
        yield process.pid
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _members_and_stops(host: Host, pgid: int, ticks: int) -> tuple[object, ...]:
    async def go() -> tuple[object, ...]:
        proven_count = len((await run_members(host, RunProcesses(pgid, ticks)))[0])
        unproven_count = len((await run_members(host, RunProcesses(pgid)))[1])  # no start time: no proof
        stale = (await end_group(host, pgid, term_timeout_s=5.0, start_ticks=ticks + 1)).outcome
        ended = (await end_group(host, pgid, term_timeout_s=5.0, start_ticks=ticks)).outcome
        again = (await end_group(host, pgid, term_timeout_s=5.0, start_ticks=ticks)).outcome
        return proven_count, unproven_count, stale, ended, again

    return asyncio.run(go())


def test_the_stop_proves_and_ends_the_same_processes_on_both(real_group: int) -> None:
    local = LocalHost()
    stat = asyncio.run(local.proc_stat(real_group))
    assert stat is not None
    memory = launch_host()
    process = memory.add_process(["sleep", "30"], start_ticks=stat.start_ticks)
    expected = (1, 1, "stale", "terminated", "not_running")
    assert _members_and_stops(local, real_group, stat.start_ticks) == expected
    assert _members_and_stops(memory, process.pid, process.start_ticks) == expected
