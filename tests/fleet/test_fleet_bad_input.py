"""Bad fleet input: one line naming the host or field and the fix, exit 2, nothing started."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.fleet.conftest import FleetFactory
from tests.launch.conftest import free_port


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def refused(path: Path, run_home: Path) -> str:
    result = run("up", str(path))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    state = run_home.parent / "state"
    assert not (state / "runs").exists() and not (state / "fleets").exists()  # nothing started
    return lines[0]


def test_host_listed_twice(smg: str, make_fleet: FleetFactory, run_home: Path) -> None:
    line = refused(make_fleet(["local", {"target": "local", "gpus": 2}]), run_home)
    assert "hosts[1]" in line and "listed twice" in line and "gpus = N" in line


def test_unreachable_host(smg: str, make_fleet: FleetFactory, run_home: Path) -> None:
    dead = f"ssh://nobody@127.0.0.1:{free_port()}"
    line = refused(make_fleet(["local", dead]), run_home)
    assert "hosts[1]" in line and "unreachable" in line and dead in line


def test_router_port_in_use(smg: str, make_fleet: FleetFactory, run_home: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        line = refused(make_fleet(["local"], router={"port": port}), run_home)
    assert "[router] port" in line and str(port) in line and "another port" in line


def test_smg_missing(make_fleet: FleetFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPILOT_SMG", str(run_home / "no-smg"))
    line = refused(make_fleet(["local"]), run_home)
    assert "[router]" in line and "pip install smg==1.13.0" in line


def test_smg_without_the_workers_api(
    make_fleet: FleetFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = tmp_path / "smg"
    old.write_text("#!/bin/sh\necho 'smg 1.12.1'\n")
    old.chmod(0o755)
    monkeypatch.setenv("SPECPILOT_SMG", str(old))
    line = refused(make_fleet(["local"]), run_home)
    assert "smg 1.12.1" in line and "/workers" in line and "pip install smg==1.13.0" in line


def test_a_host_whose_gpu_the_plan_does_not_fit(smg: str, make_fleet: FleetFactory, run_home: Path) -> None:
    small = {"target": f"ssh://nobody@127.0.0.1:{free_port()}", "gpu_memory_gib": 0.05, "gpu_name": "tiny"}
    line = refused(make_fleet(["local", small]), run_home)
    assert "hosts[1]" in line and "hosts[0]" not in line and "does not fit" in line and "tiny" in line


def test_remote_member_of_a_loopback_server(smg: str, make_fleet: FleetFactory, run_home: Path) -> None:
    line = refused(make_fleet(["local", "ssh://gpu@10.0.0.5:22"]), run_home)
    assert "[server] host" in line and "0.0.0.0" in line


def test_remote_router_bound_to_loopback(smg: str, make_fleet: FleetFactory, run_home: Path) -> None:
    line = refused(make_fleet(["local"], router={"target": "ssh://gw@10.0.0.9:22"}), run_home)
    assert "[router] host" in line and "0.0.0.0" in line


def test_replan_is_for_one_server_spec(smg: str, make_fleet: FleetFactory, run_home: Path) -> None:
    result = run("up", str(make_fleet(["local"])), "--replan", "1")
    assert result.exit_code == 2 and "--replan" in result.output and "not a fleet" in result.output
