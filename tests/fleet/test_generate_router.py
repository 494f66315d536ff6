"""`generate --router` through the real `smg`: rows committed once whatever the router does."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.generate.dispatch.client import FailureKind, classify_status
from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.dispatch.endpoints import resolve_endpoints
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import Faults, StandIn, answer_for
from tests.fixtures.jobs import run_generate
from tests.fleet.routerproc import router_call, running_router
from tests.generate.conftest import prompt_rows, read_output, write_jsonl


def generate(tmp_path: Path, rows: int, *flags: str) -> dict[str, Any]:
    source = write_jsonl(tmp_path / "in.jsonl", prompt_rows(rows))
    result = CliRunner().invoke(
        cli,
        [
            "generate",
            "--input",
            str(source),
            "--output",
            str(tmp_path / "out"),
            "--concurrency",
            "4",
            "--retry-base-s",
            "0.01",
            "--flush-interval-s",
            "0.05",
            "--json",
            *flags,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def exactly_once(out: Path, expected: int) -> None:
    rows = read_output(out)
    ids = [row["id"] for row in rows]
    assert len(ids) == expected and len(set(ids)) == expected
    for row in rows:
        assert row["conversations"][-1]["content"] == answer_for(row["conversations"][-2]["content"])[0]


def test_rows_spread_over_workers_behind_the_router(smg: str, tmp_path: Path) -> None:
    servers = [StandIn(Faults(latency_s=0.01)).start() for _ in range(3)]
    try:
        with running_router(smg, [s.url for s in servers]) as url:
            summary = generate(tmp_path, 300, "--router", url)
    finally:
        for server in servers:
            server.close()
    assert summary["done"] == 300 and summary["failed"] == 0
    exactly_once(tmp_path / "out", 300)
    answered = [s.counts.answered for s in servers]
    assert sum(answered) == 300 and all(answered)  # least_load used every worker
    assert summary["servers"] == [url]


def test_a_dead_worker_costs_no_row_and_none_left_pauses(smg: str, tmp_path: Path) -> None:
    """One worker dies mid-job (the router retries elsewhere); then every worker is
    deregistered (503 no_available_workers: paused, no attempt spent with
    --max-attempts 1), and the job finishes once they are back."""
    steady = StandIn(Faults(latency_s=0.02)).start()
    flaky = StandIn(Faults(latency_s=0.005)).start()
    events: list[str] = []

    def faults(url: str) -> None:
        while flaky.counts.answered < 50:
            time.sleep(0.01)
        flaky.stop()
        events.append("worker died")
        router_call(url, "remove", flaky.url)
        while steady.counts.answered < 150:
            time.sleep(0.01)
        router_call(url, "remove", steady.url)
        events.append("no worker")
        time.sleep(1.0)
        flaky.start()
        for server in (steady, flaky):
            assert router_call(url, "add", server.url, 30.0) is None
        events.append("back")

    try:
        with running_router(smg, [steady.url, flaky.url]) as url:
            thread = threading.Thread(target=faults, args=(url,), daemon=True)
            thread.start()
            summary = generate(tmp_path, 600, "--router", url, "--max-attempts", "1")
            thread.join(30)
    finally:
        steady.close()
        flaky.close()
    assert events == ["worker died", "no worker", "back"]
    assert summary["done"] == 600 and summary["failed"] == 0
    exactly_once(tmp_path / "out", 600)


def test_a_removal_is_carried_out_before_remove_returns(smg: str, fake_server: StandIn) -> None:
    """smg 1.13 answers DELETE /workers/{id} 202 and keeps listing the worker (a POST for its
    URL answering 409) for about 5 s: `remove` returns only once it is gone, so the address
    can be registered again at once, as a restarted member's is."""
    with running_router(smg, [fake_server.url]) as url:
        assert router_call(url, "remove", fake_server.url) == 1
        listed = router_call(url, "workers")
        assert isinstance(listed, list) and fake_server.url not in [w.url for w in listed]
        assert router_call(url, "add", fake_server.url, 30.0) is None


def test_router_without_workers_is_down_not_a_failed_row() -> None:
    body = b'{"error":{"type":"server_error","code":"no_available_workers","message":"All workers are unavailable"}}'
    assert classify_status(503, body) is FailureKind.CONNECTION
    assert classify_status(503, b'{"error":"overloaded"}') is FailureKind.RETRYABLE
    assert classify_status(400, body) is FailureKind.FATAL


def test_router_flag_refuses_a_plain_server(fake_server: StandIn, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", prompt_rows(1))
    result = CliRunner().invoke(
        cli,
        ["generate", "--input", str(source), "--output", str(tmp_path / "o"), "--router", fake_server.url],
    )
    assert result.exit_code == 2
    assert "--router" in result.output and "GET /workers" in result.output and "--server" in result.output


def test_room_follows_the_workers_the_router_lists(smg: str, tmp_path: Path) -> None:
    """A member registered mid-job (fleet-repair) widens what the job keeps in flight."""
    first = StandIn(Faults(latency_s=0.01)).start()
    second = StandIn(Faults(latency_s=0.01)).start()
    seen: list[Dispatcher] = []

    @contextlib.asynccontextmanager
    async def watch(dispatcher: Dispatcher) -> AsyncIterator[None]:
        seen.append(dispatcher)
        yield

    try:
        with running_router(smg, [first.url]) as url:
            (endpoint,) = resolve_endpoints((), (), (url,))
            assert endpoint.slots == 1

            def join_later() -> None:
                while first.counts.answered < 50:
                    time.sleep(0.01)
                assert router_call(url, "add", second.url, 30.0) is None

            thread = threading.Thread(target=join_later, daemon=True)
            thread.start()
            source = write_jsonl(tmp_path / "in.jsonl", prompt_rows(1500))
            config = JobConfig(
                source, tmp_path / "out", [endpoint], "fake-model", Sampling(True),
                concurrency=2, show_progress=False, metrics_interval_s=0.1,
            )  # fmt: skip
            outcome = run_generate(config, watch)
            thread.join(30)
    finally:
        first.close()
        second.close()
    assert outcome.exit_code == 0 and outcome.summary.done == 1500
    assert seen[0].pool.servers[0].slots == 2 and second.counts.answered > 0
