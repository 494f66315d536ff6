"""A dead router is started again by `fleet-repair` without touching the engines, and the
job through it resumes with every row once (real `smg`, stand-in engines that answer)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.fakeengines.standin import answer_for
from tests.fleet.conftest import FleetFactory, router_alive
from tests.fleet.test_fleet_up import ROUTER_DEATH_S, router_workers, up_all_serving
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

ROWS = 1500
#: rows committed before the router is killed, so the kill lands mid-job
KILL_AFTER_ROWS = 200
#: bounds on the waits of the fault thread (a loaded machine is slow, never this slow)
WAIT_S = 120.0


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def committed_rows(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (out / "data").glob("part-*.jsonl"))


def cli_subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in its own process: generate holds this one's stdout and signals."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "specpilot", *args], capture_output=True, text=True, env=env, timeout=WAIT_S
    )


def member_pids(home: Path) -> list[int]:
    return [int(json.loads((home / f"fl-{i}" / "state.json").read_text())["pid"]) for i in (0, 1)]


def kill_router(record_path: Path) -> None:
    os.killpg(int(json.loads(record_path.read_text())["routers"][0]["pid"]), signal.SIGKILL)
    deadline_s = time.monotonic() + ROUTER_DEATH_S
    while router_alive("fl") and time.monotonic() < deadline_s:
        time.sleep(0.05)


@pytest.fixture
def fleet_up(smg: str, make_fleet: FleetFactory, run_home: Path) -> Any:
    path = make_fleet(
        [{"target": "local", "gpus": 2}],
        standin={"answers": "echo", "faults": {"latency_s": 0.02}},
        router={"health_check_interval_s": 1},
    )
    try:
        yield up_all_serving(path, members=2)
    finally:
        run("down", "fl")


def test_router_killed_mid_job_repaired_without_restarting_an_engine(
    fleet_up: dict[str, Any], run_home: Path, tmp_path: Path
) -> None:
    state = run_home.parent / "state"
    record_path = state / "fleets" / "fl.json"
    pids_before = member_pids(state / "runs")
    out = tmp_path / "out"
    events: dict[str, Any] = {}

    def fault() -> None:
        deadline_s = time.monotonic() + WAIT_S
        while committed_rows(out) < KILL_AFTER_ROWS and time.monotonic() < deadline_s:
            time.sleep(0.02)
        kill_router(record_path)
        events["committed_at_kill"] = committed_rows(out)
        events["status"] = json.loads(cli_subprocess("status", "fl", "--json").stdout)
        events["repair"] = cli_subprocess("fleet-repair", "fl", "--json")

    thread = threading.Thread(target=fault, daemon=True)
    thread.start()
    source = write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS))
    result = run(
        "generate", "--input", str(source), "--output", str(out), "--fleet", "fl",
        "--concurrency", "4", "--max-attempts", "1", "--flush-interval-s", "0.05", "--json",
    )  # fmt: skip
    thread.join(WAIT_S)
    assert result.exit_code == 0, result.output

    status = events["status"]
    assert status["router_alive"] is False
    assert "fleet-repair fl" in status["repair"] and "2 serving members" in status["repair"]
    repair = events["repair"]
    assert repair.returncode == 0, repair.stdout + repair.stderr
    report = json.loads(repair.stdout)
    assert report["router"] == "restarted" and [r["action"] for r in report["routers"]] == ["restarted"]
    assert [m["action"] for m in report["members"]] == ["registered", "registered"]

    summary = json.loads(result.stdout)
    print(json.dumps(summary)[:3000])
    assert KILL_AFTER_ROWS <= events["committed_at_kill"] < ROWS  # the router died mid-job
    assert summary["done"] == ROWS and summary["failed"] == 0
    rows = read_output(out)
    assert sorted(r["id"] for r in rows) == sorted({r["id"] for r in rows}) and len(rows) == ROWS
    assert all(
        r["conversations"][-1]["content"] == answer_for(r["conversations"][-2]["content"])[0] for r in rows
    )
    # the engines were never restarted; the new router lists both
    assert member_pids(state / "runs") == pids_before
    assert json.loads(record_path.read_text())["router_restarts"] == 1
    listed = router_workers(str(fleet_up["router_url"]))
    assert sorted(w.url for w in listed) == sorted(m["worker_url"] for m in fleet_up["members"])


def test_repair_refuses_a_worker_the_fleet_does_not_know(fleet_up: dict[str, Any], tmp_path: Path) -> None:
    from tests.fakeengines.standin import StandIn
    from tests.fleet.routerproc import router_call

    stranger = StandIn().start()
    try:
        assert router_call(str(fleet_up["router_url"]), "add", stranger.url, 30.0) is None
        result = run("fleet-repair", "fl")
    finally:
        stranger.close()
    assert result.exit_code == 2
    assert f"lists {stranger.url}, which is not one of its members" in result.output
    assert "[fleet] hosts" in result.output


def bind_once_free(port: int) -> socket.socket:
    """A socket bound to `port` as soon as the killed router's last process has let go of it
    (its exit is asynchronous); TIME_WAIT connections may stay, which a server may reuse."""
    deadline_s = time.monotonic() + ROUTER_DEATH_S
    while True:
        held = socket.socket()
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            held.bind(("127.0.0.1", port))
            return held
        except OSError:
            held.close()
            if time.monotonic() > deadline_s:
                raise
            time.sleep(0.05)


def test_repair_refuses_when_the_router_cannot_start_and_starts_nothing(
    fleet_up: dict[str, Any], run_home: Path
) -> None:
    state = run_home.parent / "state"
    record_path = state / "fleets" / "fl.json"
    kill_router(record_path)
    port = int(str(fleet_up["router_url"]).rsplit(":", 1)[1])
    with bind_once_free(port) as held:  # another process took the router's port meanwhile
        held.listen()
        result = run("fleet-repair", "fl")
    assert result.exit_code == 2
    assert "[router] port" in result.output and "is not free" in result.output
    assert not router_alive("fl") and "router_restarts" not in json.loads(record_path.read_text())
