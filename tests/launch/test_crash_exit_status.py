"""`status` between the engine's death and its watcher's record of it: the crash it records
gets the exit status once the watcher has written it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from specpilot.hosts.memory import MemoryHost, MemoryProcess
from specpilot.launch.ops import run_down, run_status
from specpilot.launch.state import read_state
from specpilot.spec import Spec
from tests.fakeengines.scenarios import SCENARIOS
from tests.fixtures.memory_host import launch_host, playing
from tests.launch.conftest import SpecFactory
from tests.launch.helpers import up


def _zombie_engine(
    make_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch
) -> tuple[Spec, MemoryHost, MemoryProcess]:
    """A ready run on a MemoryHost whose engine has died and is not yet reaped: no exit
    record yet. Returns the spec, the host and the engine's scripted process."""
    host = launch_host(spawn_script=playing(SCENARIOS["sglang_ready"]))
    monkeypatch.setattr("specpilot.launch.ops.host_for", lambda state: host)
    spec = make_spec("sglang_ready")
    result = up(spec, host=host)
    assert (result.phase, result.cause) == ("ready", "ready"), result.error
    assert result.pid is not None
    engine = host.processes[result.pid]
    engine.alive = False
    return spec, host, engine


def test_a_crash_seen_before_the_watcher_reaped_the_engine_gets_its_exit_status_later(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, host, engine = _zombie_engine(make_spec, monkeypatch)
    first = asyncio.run(run_status(spec.name))
    assert first.phase == "failed" and first.crash is not None
    assert first.crash.exit_status is None and first.exit_status is None
    host.end(engine, -9)  # the watcher reaps it and records how it ended
    later = asyncio.run(run_status(spec.name))
    assert later.crash is not None and later.crash.exit_status == -9
    assert "killed by SIGKILL (signal 9)" in later.crash.line
    recorded = read_state(spec.name).crash
    assert recorded is not None and recorded.exit_status == -9
    assert recorded.line == later.crash.line


def test_a_stopped_runs_crash_keeps_what_it_recorded(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `down`, the process's end may be that stop's own signal: not the crash's."""
    spec, host, engine = _zombie_engine(make_spec, monkeypatch)
    asyncio.run(run_status(spec.name))
    asyncio.run(run_down(spec.name, timeout_s=1.0))
    host.end(engine, -15)
    after = asyncio.run(run_status(spec.name))
    assert after.phase == "stopped" and after.exit_status == -15
    assert after.crash is not None and after.crash.exit_status is None
