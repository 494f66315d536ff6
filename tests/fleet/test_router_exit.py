"""How a router replica ended: its own start's record, read by `status`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path

from specpilot.fleet.ops import fleet_status, replica_exit_status
from specpilot.fleet.router import RouterProcess, exit_path_of, spawn_router
from specpilot.fleet.state import write_fleet
from specpilot.fleet.up import replica_entry
from specpilot.hosts.local import LocalHost
from tests.launch.conftest import run_home  # noqa: F401  (a fixture used here)

WAIT_S = 30.0
URL = "http://127.0.0.1:1"


def _record(*replicas: dict[str, object]) -> dict[str, object]:
    return {
        "name": "fl",
        "router_url": URL,
        "router_target": "local",
        "routers": list(replicas),
        "members": [],
    }


def _wait_for(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"waited {WAIT_S:g} s for {what}"
        time.sleep(0.05)


def _spawn(argv: list[str], log_dir: Path) -> RouterProcess:
    return asyncio.run(spawn_router(LocalHost(), argv, str(log_dir), "fl", secrets.token_hex(16)))


def test_a_late_reaped_earlier_router_does_not_write_the_new_starts_exit(tmp_path: Path) -> None:
    go = tmp_path / "go"
    earlier = _spawn(["sleep", "60"], tmp_path)
    later = _spawn(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"], tmp_path)
    try:
        assert later.exit_path != earlier.exit_path
        os.kill(earlier.pid, signal.SIGKILL)  # reaped by its watcher after the name was reused
        _wait_for(
            "the earlier router's watcher to record its end",
            lambda: Path(earlier.exit_path).exists(),
        )
        assert '"returncode": -9' in Path(earlier.exit_path).read_text()
        entry = replica_entry(URL, later, [])
        # the later router still runs: nothing of the earlier one's end is read as its own
        assert asyncio.run(replica_exit_status(_record(entry), entry)) is None
        go.touch()
        _wait_for("the later router's end", lambda: Path(later.exit_path).exists())
        assert asyncio.run(replica_exit_status(_record(entry), entry)) == 3
        earlier_entry = replica_entry(URL, earlier, [])
        assert asyncio.run(replica_exit_status(_record(earlier_entry), earlier_entry)) == -9
    finally:
        go.touch()
        for pid in (earlier.pid, later.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_status_shows_the_recorded_exit_of_a_router_not_running(
    run_home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    process = _spawn(["sh", "-c", "exit 7"], tmp_path)
    _wait_for("the router's end", lambda: Path(process.exit_path).exists())
    write_fleet(_record(replica_entry(URL, process, [])))
    shown = asyncio.run(fleet_status("fl")).to_json()
    assert shown["routers"] == [{"url": URL, "alive": False, "exit_status": 7}]


def test_a_record_from_before_per_start_exit_files_reads_the_old_name(
    run_home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    log = tmp_path / "fl.router.log"
    (tmp_path / "fl.router.exit").write_text(json.dumps({"returncode": -15}) + "\n")
    old = {
        "name": "fl",
        "router_url": URL,
        "router_target": "local",
        "router_pid": None,
        "router_log": str(log),
    }
    old["members"] = []
    write_fleet(old)
    assert exit_path_of({"log": str(log)}) == str(tmp_path / "fl.router.exit")
    shown = asyncio.run(fleet_status("fl")).to_json()
    assert shown["routers"] == [{"url": URL, "alive": False, "exit_status": -15}]
