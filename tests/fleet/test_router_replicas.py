"""`[router] replicas = 2`: two independent `smg` routers in front of the same members; the
job fails over between them (real `smg`, stand-in engines that answer)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specpilot.fleet.ops import routers_running
from specpilot.fleet.state import read_fleet
from specpilot.generate.dispatch.servers import ServerPool
from tests.fleet.conftest import FleetFactory
from tests.fleet.test_fleet_up import ROUTER_DEATH_S, router_workers, up_all_serving
from tests.fleet.test_router_repair import (
    KILL_AFTER_ROWS,
    ROWS,
    WAIT_S,
    cli_subprocess,
    committed_rows,
    member_pids,
    run,
)
from tests.generate.conftest import prompt_rows, read_output, write_jsonl


class Pending:
    """An in-flight request as the pool sees it: something it can cancel."""

    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def fill(pool: ServerPool, first_position: int) -> list[str]:
    picked = []
    while (server := pool.pick()) is not None:
        server.in_flight[first_position + len(picked)] = Pending()  # type: ignore[assignment]
        picked.append(server.base_url)
    return picked


def test_replicas_share_one_room_and_the_survivor_takes_all_of_it() -> None:
    urls = ["http://a", "http://b"]
    pool = ServerPool(urls, 2, dict.fromkeys(urls, 3), dict.fromkeys(urls, "fleet"))
    # 2 per worker x 3 workers in all, whichever replica they go through, spread over both
    assert sorted(fill(pool, 0)) == ["http://a"] * 3 + ["http://b"] * 3
    assert sorted(pool.take_out(pool.servers[0])) == [0, 2, 4]
    assert fill(pool, 10) == ["http://b"] * 3  # the dead replica's room moved to the other
    assert len(pool.servers[1].in_flight) == 6


def test_servers_not_grouped_keep_their_own_room() -> None:
    urls = ["http://a", "http://b"]
    pool = ServerPool(urls, 2, dict.fromkeys(urls, 3))
    assert sorted(fill(pool, 0)) == ["http://a"] * 6 + ["http://b"] * 6


def test_more_replicas_than_supported_is_one_line(make_fleet: FleetFactory, run_home: Path) -> None:
    result = run("up", str(make_fleet(["local"], router={"replicas": 3})))
    assert result.exit_code == 2
    assert "[router] replicas" in result.output and "set replicas = 2" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (run_home.parent / "state" / "fleets").exists()  # nothing started


@pytest.fixture
def two_routers(smg: str, make_fleet: FleetFactory, run_home: Path) -> Any:
    path = make_fleet(
        [{"target": "local", "gpus": 2}],
        standin={"answers": "echo", "faults": {"latency_s": 0.02}},
        router={"health_check_interval_s": 1, "replicas": 2},
    )
    try:
        yield up_all_serving(path, members=2)
    finally:
        run("down", "fl")


def test_a_replica_killed_mid_job_costs_no_row_and_repair_restarts_only_it(
    two_routers: dict[str, Any], run_home: Path, tmp_path: Path
) -> None:
    import asyncio

    state = run_home.parent / "state"
    record = read_fleet("fl")
    urls = [r["url"] for r in record["routers"]]
    members = sorted(m["worker_url"] for m in two_routers["members"])
    for url in urls:  # every member is registered with both (a router lists one once it has added it)
        deadline_s = time.monotonic() + WAIT_S
        while sorted(w.url for w in router_workers(url)) != members and time.monotonic() < deadline_s:
            time.sleep(0.1)
        assert sorted(w.url for w in router_workers(url)) == members
    pids_before = member_pids(state / "runs")
    out = tmp_path / "out"
    events: dict[str, Any] = {}

    def fault() -> None:
        deadline_s = time.monotonic() + WAIT_S
        while committed_rows(out) < KILL_AFTER_ROWS and time.monotonic() < deadline_s:
            time.sleep(0.02)
        os.killpg(int(record["routers"][0]["pid"]), signal.SIGKILL)
        until_s = time.monotonic() + ROUTER_DEATH_S
        while asyncio.run(routers_running(record))[0] and time.monotonic() < until_s:
            time.sleep(0.05)
        events["committed_at_kill"] = committed_rows(out)

    thread = threading.Thread(target=fault, daemon=True)
    thread.start()
    source = write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS))
    result = run(
        "generate", "--input", str(source), "--output", str(out), "--fleet", "fl",
        "--concurrency", "4", "--max-attempts", "1", "--flush-interval-s", "0.05", "--json",
    )  # fmt: skip
    thread.join(WAIT_S)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert KILL_AFTER_ROWS <= events["committed_at_kill"] < ROWS
    assert summary["done"] == ROWS and summary["failed"] == 0
    rows = read_output(out)
    assert len(rows) == ROWS and len({r["id"] for r in rows}) == ROWS
    per_router = {s["server"]: s for s in summary["this_run_servers"]}
    first, second = (u.split("://", 1)[1] for u in urls)
    assert per_router[first]["taken_out"] == 1 and per_router[second]["taken_out"] == 0
    assert per_router[second]["rows_done"] > ROWS - events["committed_at_kill"] - 100  # it took over

    status = json.loads(cli_subprocess("status", "fl", "--json").stdout)
    assert [r["alive"] for r in status["routers"]] == [False, True]
    assert urls[0] in status["repair"]
    repair = cli_subprocess("fleet-repair", "fl", "--json")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    report = json.loads(repair.stdout)
    assert [r["action"] for r in report["routers"]] == ["restarted", "ok"]
    assert [m["action"] for m in report["members"]] == ["registered", "registered"]
    assert member_pids(state / "runs") == pids_before  # no engine restarted
    for url in urls:
        assert sorted(w.url for w in router_workers(url)) == members
    assert (
        json.loads((state / "fleets" / "fl.json").read_text())["routers"][1]["pid"]
        == record["routers"][1]["pid"]
    )
