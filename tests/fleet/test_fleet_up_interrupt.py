"""A signal to `up FLEET` while its members start, or while its router starts, ends it as
Ctrl-C ends a single `up`: exit 130, one line (under --json one object), and nothing it
started is left running. With the real `smg` router and stand-in members; synchronised on
the pid files `up` writes (no sleeps)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.fleet.state import is_fleet
from tests.bench.test_bench_signals import holding
from tests.fixtures.engines import process_group_members
from tests.fleet.conftest import FleetFactory
from tests.launch.conftest import free_port
from tests.launch.test_up_interrupt import wait_for

ROOT = Path(__file__).resolve().parents[2]
LINE = "interrupted: fleet fl: every member and router this up started is stopped"
#: how long what `up` stopped may take to be reaped on a loaded machine
GONE_S = 15.0
#: phase -> (the members' scenario, the file whose appearance puts `up` in that phase)
PHASES: dict[str, tuple[str, Callable[[Path], Path]]] = {
    # a member that never becomes ready by itself: `up` is still starting the members
    "members": ("sglang_hang_after_weights", lambda home: home / "runs" / "fl-0" / "pid"),
    # the router's pid, as its spawn writes it: `up` is spawning it or waiting for it to answer
    "router": ("sglang_ready", lambda home: home / "fleets" / "fl.router.pid"),
}


def routers_on(port: int) -> list[int]:
    """Live `smg launch ... --port PORT` processes (found by argv here, in the test only: a
    router whose pid `up` never recorded is found too)."""
    wanted = str(port).encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        ported = any(a == b"--port" and b == wanted for a, b in itertools.pairwise(argv))
        if b"launch" in argv and ported and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def members_left(home: Path) -> list[int]:
    """What is alive of every member run recorded: its group, and whatever holds its token."""
    found: set[int] = set()
    for state_file in (home / "runs").glob("fl-*/state.json"):
        state = json.loads(state_file.read_text())
        found |= set(holding(state["run_token"]))
        if state["pgid"] > 1:
            found |= set(process_group_members(state["pgid"]))
    return sorted(found)


def wait_until(check: Callable[[], list[int]], within_s: float = GONE_S) -> list[int]:
    """`check()` until it finds nothing, at most `within_s`; what it last found."""
    deadline = time.monotonic() + within_s
    while (left := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def leftovers() -> Iterator[list[int]]:
    """Pids a failing test found still running: killed after it, by pid."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("phase", "sig", "as_json"),
    [
        ("members", signal.SIGTERM, True),
        ("members", signal.SIGINT, False),
        ("router", signal.SIGTERM, False),
        ("router", signal.SIGINT, True),
    ],
    ids=["members-term-json", "members-int", "router-term", "router-int-json"],
)
def test_a_signal_during_fleet_up_stops_everything_it_started(
    phase: str,
    sig: signal.Signals,
    as_json: bool,
    smg: str,
    make_fleet: FleetFactory,
    run_home: Path,
    leftovers: list[int],
) -> None:
    scenario, marker = PHASES[phase]
    router_port = free_port()
    path = make_fleet(
        [{"target": "local", "gpus": 2}],
        scenario=scenario,
        router={"port": router_port, "metrics_port": free_port()},
    )
    home = Path(os.environ["SPECPILOT_HOME"])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "specpilot", "up", str(path), *(["--json"] if as_json else [])]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(marker(home), process)
        process.send_signal(sig)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        leftovers.extend([*routers_on(router_port), *members_left(home)])
        CliRunner().invoke(cli, ["down", "fl"])

    assert process.returncode == 130, out + err
    # the one line, last, and nothing after it: no traceback, no task "never retrieved"
    assert err.strip().splitlines()[-1] == f"error: {LINE}", err
    assert err.count(LINE) == 1 and "Traceback" not in err and "never retrieved" not in err, err
    if as_json:
        assert json.loads(out) == {"error": LINE, "fix": None, "exit": 130}
    else:
        assert out.strip() == "", out
    assert wait_until(lambda: routers_on(router_port)) == []
    assert wait_until(lambda: members_left(home)) == []
    # and `status` says so: no router up, no member alive
    if is_fleet("fl"):
        status = CliRunner().invoke(cli, ["status", "fl", "--json"])
        assert status.exit_code == 1, status.output
        shown = json.loads(status.stdout)
        assert not any(router["alive"] for router in shown["routers"]), shown
        assert not any(m["serving"] for m in shown["members"]), shown
    for state_file in (home / "runs").glob("fl-*/state.json"):
        member = CliRunner().invoke(cli, ["status", state_file.parent.name, "--json"])
        assert member.exit_code == 1 and not json.loads(member.stdout)["alive"], member.output


def test_a_signal_during_fleet_repair_stops_the_restart_it_began(
    smg: str, make_fleet: FleetFactory, run_home: Path, leftovers: list[int]
) -> None:
    """What the pass in flight started is stopped; the member and router it found serving stay."""
    path = make_fleet([{"target": "local", "gpus": 2}])
    up = CliRunner().invoke(cli, ["up", str(path), "--json"])
    try:
        assert up.exit_code == 0 and json.loads(up.stdout)["registered"] == 2, up.output
        home = Path(os.environ["SPECPILOT_HOME"])
        state_file = home / "runs" / "fl-1" / "state.json"
        dead = json.loads(state_file.read_text())
        os.killpg(dead["pgid"], signal.SIGKILL)
        assert wait_until(lambda: process_group_members(dead["pgid"])) == []

        def restarted() -> bool:
            state = json.loads(state_file.read_text())
            return bool(state["run_token"] != dead["run_token"] and state["pid"] > 0)

        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        argv = [sys.executable, "-m", "specpilot", "fleet-repair", "fl", "--backoff-s", "0"]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while not restarted():
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "fl-1 was never restarted"
                time.sleep(0.005)
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        restart = json.loads(state_file.read_text())
        leftovers.extend(holding(restart["run_token"]))
        assert process.returncode == 130, out + err
        line = "error: interrupted: what fleet-repair started for fl is stopped"
        assert err.strip().splitlines()[-1] == line and "Traceback" not in err, err
        assert wait_until(lambda: holding(restart["run_token"])) == []
        status = CliRunner().invoke(cli, ["status", "fl", "--json"])
        shown = json.loads(status.stdout)
        assert shown["router_alive"], shown
        assert [m["serving"] for m in shown["members"]] == [True, False], shown
    finally:
        CliRunner().invoke(cli, ["down", "fl"])
