"""`up FLEET`, `status`, `down` with the real `smg` router and stand-in engines."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.fleet.router import RouterClient, Worker
from specpilot.generate.dispatch.endpoints import resolve_endpoints
from specpilot.launch.state import run_folder
from tests.fixtures.sshd import SshdServer
from tests.fleet.conftest import FleetFactory, router_alive
from tests.launch.conftest import free_port

#: how long a SIGKILLed router may take to be gone on a loaded machine
ROUTER_DEATH_S = 10.0


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def router_workers(url: str) -> list[Worker]:
    async def go() -> list[Worker]:
        async with aiohttp.ClientSession() as session:
            return await RouterClient(session, url).workers()

    return asyncio.run(go())


def up_json(path: Path) -> tuple[int, dict[str, object]]:
    result = run("up", str(path), "--json")
    assert result.stdout.strip(), result.output
    return result.exit_code, json.loads(result.stdout)


def up_all_serving(path: Path, members: int) -> dict[str, Any]:
    """`up --json` for a fixture, asserted whole (`assert_all_serving`)."""
    code, out = up_json(path)
    assert_all_serving(code, out, members)
    return out


def assert_all_serving(code: int, out: dict[str, Any], members: int) -> None:
    """`up` exits 0 with a member left out (one registered is enough), so a fixture that
    checked the exit code alone let a member that failed to start surface tests later as
    "1 serving member". Here every one of `members` is registered, and serving by `status`."""
    assert code == 0, out
    phases = {str(m["name"]): (m["phase"], m["error"]) for m in cast(list[dict[str, Any]], out["members"])}
    assert len(phases) == members and all(p == "registered" for p, _ in phases.values()), phases
    status = run("status", str(out["name"]), "--json")
    assert status.exit_code == 0, status.output
    found = {m["name"]: (m["serving"], m["registered"]) for m in json.loads(status.stdout)["members"]}
    assert found == dict.fromkeys(phases, (True, True)), status.stdout


@pytest.fixture
def downs() -> Iterator[list[str]]:
    """Fleet names to take down after the test, whatever it asserted."""
    names: list[str] = []
    yield names
    for name in names:
        run("down", name)


def test_two_members_on_one_host_registered_and_down_stops_all(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str]
) -> None:
    path = make_fleet([{"target": "local", "gpus": 2}])
    downs.append("fl")
    code, out = up_json(path)
    assert code == 0, out
    members = out["members"]
    assert isinstance(members, list) and [m["phase"] for m in members] == ["registered", "registered"]
    urls = {m["worker_url"] for m in members}
    assert len(urls) == 2  # one port each on the shared host
    listed = router_workers(str(out["router_url"]))
    assert {w.url for w in listed} == urls and all(w.status == "ready" for w in listed)
    # each member got its own GPU, in the verified env file shipped with it
    env_files = [(run_folder(f"fl-{i}") / "env").read_text() for i in (0, 1)]
    assert "CUDA_VISIBLE_DEVICES=0" in env_files[0] and "CUDA_VISIBLE_DEVICES=1" in env_files[1]

    status = run("status", "fl", "--json")
    assert status.exit_code == 0
    assert all(m["serving"] and m["registered"] for m in json.loads(status.stdout)["members"])
    (endpoint,) = resolve_endpoints((), (), (), ("fl",))  # generate --fleet fl
    assert endpoint.router and endpoint.base_url == out["router_url"] and endpoint.slots == 2
    member = run("status", "fl-1", "--json")  # one member, as any run
    assert member.exit_code == 0 and json.loads(member.stdout)["phase"] == "ready"

    down = run("down", "fl", "--json")
    assert down.exit_code == 0
    stopped = json.loads(down.stdout)
    assert stopped["router"] in ("terminated", "killed")
    assert {m["phase"] for m in stopped["members"]} == {"stopped"}
    after = run("status", "fl", "--json")
    assert after.exit_code == 1 and not json.loads(after.stdout)["router_alive"]


def test_failing_member_is_left_out_with_its_cause(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str]
) -> None:
    path = make_fleet([{"target": "local", "gpus": 2}])
    downs.append("fl")
    spec_port = int(
        next(
            line for line in (path.parent / "member.toml").read_text().splitlines() if line.startswith("port")
        ).split("=")[1]
    )
    with socket.socket() as held:  # the second member's port is taken: it cannot start
        held.bind(("127.0.0.1", spec_port + 1))
        held.listen()
        code, out = up_json(path)
    assert code == 0, out
    members = out["members"]
    assert isinstance(members, list)
    assert [m["phase"] for m in members] == ["registered", "failed"]
    assert members[1]["cause"] == "port_in_use"
    with pytest.raises(AssertionError, match="failed"):  # what a fixture refuses to build on
        assert_all_serving(code, out, members=2)
    assert {w.url for w in router_workers(str(out["router_url"]))} == {members[0]["worker_url"]}


@pytest.mark.sshd
def test_members_over_two_real_sshd_hosts(
    smg: str,
    make_fleet: FleetFactory,
    run_home: Path,
    downs: list[str],
    sshd_pair: tuple[list[SshdServer], str],
) -> None:
    servers, known_hosts = sshd_pair
    spec_host = {"target": "local", "identity_file": servers[0].identity_file, "known_hosts": known_hosts}
    path = make_fleet([s.target for s in servers], name="sshfl", spec_host=spec_host)
    downs.append("sshfl")
    try:
        code, out = up_json(path)
        assert code == 0, out
        members = out["members"]
        assert isinstance(members, list)
        assert [m["target"] for m in members] == [s.target for s in servers]
        assert all(m["phase"] == "registered" for m in members)
        assert len(router_workers(str(out["router_url"]))) == 2
    finally:
        run("down", "sshfl")
        runs = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".specpilot" / "runs"
        for i in range(2):
            shutil.rmtree(runs / f"sshfl-{i}", ignore_errors=True)


def test_repair_restarts_a_dead_member_and_registers_it_again(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str]
) -> None:
    path = make_fleet([{"target": "local", "gpus": 2}])
    downs.append("fl")
    up = run("up", str(path), "--json")
    assert up.exit_code == 0, up.output
    # under --json the members' progress is on stderr (it was dropped), the object alone on stdout
    out: dict[str, object] = json.loads(up.stdout)
    assert out["registered"] == 2
    assert "fl-1 on local: ready, registered as" in up.stderr, up.stderr
    dead = json.loads((run_home.parent / "state" / "runs" / "fl-1" / "state.json").read_text())
    os.killpg(int(dead["pgid"]), signal.SIGKILL)
    before = json.loads(run("status", "fl", "--json").stdout)["members"]
    assert [m["serving"] for m in before] == [True, False]

    repaired = run("fleet-repair", "fl", "--backoff-s", "0", "--json")
    assert repaired.exit_code == 0, repaired.output
    actions = {m["name"]: m["action"] for m in json.loads(repaired.stdout)["members"]}
    assert actions == {"fl-0": "ok", "fl-1": "restarted"}
    assert "fl-1: ready again and registered as" in repaired.stderr, repaired.stderr
    after = json.loads((run_home.parent / "state" / "runs" / "fl-1" / "state.json").read_text())
    assert after["phase"] == "ready" and after["pid"] != dead["pid"]
    listed = router_workers(str(out["router_url"]))
    assert sorted(w.url for w in listed) == sorted(m["worker_url"] for m in out["members"])  # type: ignore[union-attr]
    assert all(w.status == "ready" and w.healthy for w in listed)


def test_repair_refuses_a_changed_fleet_file(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str]
) -> None:
    path = make_fleet(["local"])
    downs.append("fl")
    code, _ = up_json(path)
    assert code == 0
    path.write_text(path.read_text().replace('hosts = ["local"]', 'hosts = [{ target = "local", gpus = 2 }]'))
    result = run("fleet-repair", "fl")
    assert result.exit_code == 2 and "changed since `up`" in result.output


def test_up_again_refuses_while_a_member_runs(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str]
) -> None:
    path = make_fleet(["local"])
    downs.append("fl")
    code, _ = up_json(path)
    assert code == 0
    router_pid = json.loads((run_home.parent / "state" / "fleets" / "fl.json").read_text())["routers"][0][
        "pid"
    ]
    os.killpg(router_pid, signal.SIGKILL)  # the router is gone, its member is not
    deadline_s = time.monotonic() + ROUTER_DEATH_S  # SIGKILL is delivered, not instant
    while router_alive("fl") and time.monotonic() < deadline_s:
        time.sleep(0.05)
    again = run("up", str(path))
    assert again.exit_code == 2
    assert "fl-0 is already running" in again.output and "specpilot down fl" in again.output


@pytest.mark.sshd
def test_router_on_a_named_host(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str], sshd: SshdServer
) -> None:
    """The router runs on another host (here the loopback sshd), started and stopped there."""
    spec_host = {"target": "local", "identity_file": sshd.identity_file, "known_hosts": sshd.known_hosts}
    path = make_fleet(["local"], name="rfl", spec_host=spec_host, router={"target": sshd.target, "smg": smg})
    downs.append("rfl")
    real_fleets = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".specpilot" / "fleets"
    try:
        code, out = up_json(path)
        assert code == 0, out
        record = json.loads((run_home.parent / "state" / "fleets" / "rfl.json").read_text())
        assert record["router_target"] == sshd.target
        assert record["routers"][0]["log"] == str(real_fleets / "rfl.router.log")  # on the router's host
        assert len(router_workers(str(out["router_url"]))) == 1
        logs = run("logs", "rfl")
        assert logs.exit_code == 0 and "smg" in logs.stdout
        down = run("down", "rfl", "--json")
        assert json.loads(down.stdout)["router"] in ("terminated", "killed")
        assert json.loads(run("status", "rfl", "--json").stdout)["router_alive"] is False
    finally:
        for leftover in real_fleets.glob("rfl.router.*"):
            leftover.unlink()


@pytest.mark.sshd
def test_router_host_without_smg(make_fleet: FleetFactory, run_home: Path, sshd: SshdServer) -> None:
    spec_host = {"target": "local", "identity_file": sshd.identity_file, "known_hosts": sshd.known_hosts}
    router = {"target": sshd.target, "smg": str(run_home / "nowhere" / "smg")}
    result = run("up", str(make_fleet(["local"], spec_host=spec_host, router=router)))
    assert result.exit_code == 2
    assert "[router] smg" in result.output and "pip install smg==1.13.0" in result.output
    assert not (run_home.parent / "state" / "fleets").exists()


def test_down_stops_what_it_reaches_when_a_member_host_is_gone(
    smg: str, make_fleet: FleetFactory, run_home: Path, downs: list[str]
) -> None:
    path = make_fleet([{"target": "local", "gpus": 2}])
    downs.append("fl")
    code, _ = up_json(path)
    assert code == 0
    state_file = run_home.parent / "state" / "runs" / "fl-1" / "state.json"
    real = state_file.read_text()
    lost = json.loads(real)
    lost["target"] = f"ssh://nobody@127.0.0.1:{free_port()}"  # its host no longer answers
    state_file.write_text(json.dumps(lost))
    try:
        status = json.loads(run("status", "fl", "--json").stdout)
        assert [m["phase"] for m in status["members"]] == ["ready", "unreachable"]
        down = run("down", "fl", "--json")
        assert down.exit_code == 1
        result = json.loads(down.stdout)
        assert result["router"] in ("terminated", "killed")
        assert [m["stopped"] for m in result["members"]] == ["terminated", "unreachable"]
    finally:
        state_file.write_text(real)
        run("down", "fl-1")
