"""Errors in a fleet's parallel work surface, named; expected ones are still handled.

Before: a bug in one member's start was raised while the other starts ran on unawaited
(a second failure vanished); a stop that failed while cleaning up was dropped
(`gather(..., return_exceptions=True)` results ignored), so a member could be left running
with nothing said; a bug in one member's stop during `down` cancelled the others' stops.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import specpilot.fleet.ops as fleet_ops
import specpilot.fleet.repair as fleet_repair
import specpilot.fleet.up as fleet_up
from specpilot.cli import cli
from specpilot.fleet.spec import load_fleet
from specpilot.hosts.errors import CommandFailed, HostConnectionLost
from specpilot.launch.ops import run_status
from specpilot.launch.server_plan import ServerPlan
from specpilot.launch.state import state_path
from specpilot.taskgroup import TaskFailed
from tests.fleet.conftest import FleetFactory, router_alive
from tests.launch.test_up_twice import read_only_home  # noqa: F401  (a fixture used here)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def alive(name: str) -> bool:
    return state_path(name).exists() and asyncio.run(run_status(name, lines=0)).alive


@pytest.fixture
def downs() -> Iterator[list[str]]:
    """Fleet names to take down after the test, whatever it asserted."""
    names: list[str] = []
    yield names
    for name in names:
        run("down", name)


def test_a_bug_in_one_member_start_stops_the_fleet_named(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_fleet([{"target": "local", "gpus": 2}])
    downs.append("fl")
    real_launch = fleet_up.launch

    async def launch(server: ServerPlan, *args: object, **kwargs: object) -> object:
        if server.started.name == "fl-1":
            raise RuntimeError("bug in a member's start")
        return await real_launch(server, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fleet_up, "launch", launch)
    result = run("up", str(path))
    assert result.exit_code == 1, result.output
    assert "starting member fl-1 failed: RuntimeError: bug in a member's start" in result.output
    assert not router_alive("fl") and not alive("fl-0")


def test_cleanup_names_an_unreachable_member_and_raises_a_bug_after_trying_every_stop(
    make_fleet: FleetFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = load_fleet(make_fleet([{"target": "local", "gpus": 2}]))
    for member in fleet.members:  # both were started: each has its run state
        state_path(member.name).parent.mkdir(parents=True, exist_ok=True)
        state_path(member.name).write_text("{}")
    tried: list[str] = []

    async def run_down(name: str, timeout_s: float) -> dict[str, object]:
        tried.append(name)
        if name == "fl-0":  # expected: its host went away
            raise HostConnectionLost("ssh to gpu-a: the connection dropped")
        raise RuntimeError("bug in a stop")

    monkeypatch.setattr(fleet_up, "run_down", run_down)
    router = subprocess.Popen(["sleep", "600"], start_new_session=True)
    said: list[str] = []
    try:
        stat = Path(f"/proc/{router.pid}/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # recorded at start: what proves it
        record = {
            "name": "fl",
            "router_pid": router.pid,
            "router_start_ticks": ticks,
            "router_target": "local",
        }
        with pytest.raises(TaskFailed, match="stopping member fl-1 failed: RuntimeError: bug in a stop"):
            asyncio.run(fleet_up._stop_everything(fleet, record, said.append))
        assert router.wait(timeout=30) != 0  # the router was stopped all the same
    finally:
        router.kill()
        router.wait()
    assert sorted(tried) == ["fl-0", "fl-1"]
    assert said == [
        "fl-0: not stopped (ssh to gpu-a: the connection dropped); stop it with `specpilot down fl-0`"
    ]


def test_bugs_in_repair_and_down_are_named_and_down_still_stops_the_rest(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_fleet([{"target": "local", "gpus": 2}])
    downs.append("fl")
    assert run("up", str(path)).exit_code == 0

    real_status = fleet_repair.run_status

    async def status(name: str, **kwargs: int) -> object:
        if name == "fl-1":
            raise RuntimeError("bug in a repair")
        return await real_status(name, **kwargs)

    monkeypatch.setattr(fleet_repair, "run_status", status)
    repaired = run("fleet-repair", "fl")
    assert repaired.exit_code == 1, repaired.output
    assert "repairing member fl-1 failed: RuntimeError: bug in a repair" in repaired.output

    real_down = fleet_ops.run_down

    async def down(name: str, **kwargs: float) -> dict[str, object]:
        if name == "fl-0":
            raise RuntimeError("bug in a stop")
        return await real_down(name, **kwargs)

    monkeypatch.setattr(fleet_ops, "run_down", down)
    stopped = run("down", "fl")
    assert stopped.exit_code == 1, stopped.output
    assert "stopping member fl-0 failed: RuntimeError: bug in a stop" in stopped.output
    assert not router_alive("fl") and not alive("fl-1")  # the others were stopped all the same
    assert alive("fl-0")  # the one whose stop hit the bug
    monkeypatch.setattr(fleet_ops, "run_down", real_down)
    again = run("down", "fl")
    assert again.exit_code == 0, again.output
    assert not alive("fl-0")


def test_a_router_that_cannot_be_spawned_is_said_as_itself(
    smg: str, make_fleet: FleetFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first replica failing to spawn crashed the clean-up ('unexpected ValueError: zip()',
    then 'IndexError' stopping no replica), hiding why."""
    path = make_fleet([{"target": "local", "gpus": 2}])

    async def spawn(*args: object) -> object:
        raise CommandFailed(
            "run mkdir -p -m 700 /x on local: exit status 1: no room", returncode=1, stderr=b""
        )

    monkeypatch.setattr(fleet_up, "spawn_router_of", spawn)
    result = run("up", str(path))
    assert "no room" in result.output and "unexpected" not in result.output, result.output
    assert result.exit_code != 0


def test_a_read_only_home_refuses_a_fleet_up_before_any_start(
    smg: str,
    make_fleet: FleetFactory,
    run_home: Path,
    read_only_home: Path,  # noqa: F811
) -> None:
    path = make_fleet([{"target": "local", "gpus": 2}])
    result = run("up", str(path))
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(
        f"error: SPECPILOT_HOME: {read_only_home} cannot be written (Read-only file system)"
    )
