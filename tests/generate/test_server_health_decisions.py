"""The servers' side of failures (dispatch/health.py) with a scripted probe and no server:
whose fault a failure was, taking a server out and probing it back, the all-down pause."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, cast

import aiohttp

from specpilot.generate.dispatch.causes import SERVER_DOWN
from specpilot.generate.dispatch.client import FailureKind, RequestFailed
from specpilot.generate.dispatch.health import AllDownPause, ServerHealth
from specpilot.generate.dispatch.policy import DispatchPolicy, RetryPolicy
from specpilot.generate.dispatch.retries import RowRetries
from specpilot.generate.dispatch.servers import (
    FAILURES_BEFORE_TAKE_OUT,
    IDLE_REJOINS_LIMIT,
    Server,
    ServerPool,
)
from specpilot.generate.dispatch.state import InFlight, RowQueue
from specpilot.generate.dispatch.stats import LiveStats
from specpilot.generate.rows.types import PromptRow

POLICY = DispatchPolicy(
    concurrency=4,
    keep_given_turns=False,
    retry=RetryPolicy(max_attempts=5, base_s=0.0, cap_s=0.0),
    request_timeout_s=30.0,
    probe_timeout_s=1.0,
    probe_cap_s=0.01,
    give_up_after_s=100.0,
    flush_interval_s=1.0,
    flush_rows=100,
    metrics_interval_s=1.0,
    progress_interval_s=None,
)
REFUSED = RequestFailed(FailureKind.CONNECTION, "connection failed: refused")


class Job:
    """A ServerHealth over one server and a scripted probe; its tasks are kept to be awaited."""

    def __init__(self, alive: list[bool], rows: int = 4) -> None:
        self.alive = alive  # the probe's answers, in order; the last one repeats
        self.said: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.pool = ServerPool(["http://127.0.0.1:1"], POLICY.concurrency)
        self.server = self.pool.servers[0]
        queue = RowQueue(iter([PromptRow(p, f"r{p}", [[]]) for p in range(rows)]), rows)
        queue.refill()
        queue.ready.clear()
        self.stats = LiveStats()
        self.rows = RowRetries(POLICY.retry, queue, InFlight(), self.stats, self.said.append)
        self.health = ServerHealth(
            self.pool,
            self.rows,
            self.probe,
            cast(aiohttp.ClientSession, None),
            POLICY,
            AllDownPause(POLICY.give_up_after_s, never_answered_limit_s=10.0),
            self.stats,
            self.spawn,
            self.said.append,
        )

    async def probe(self, session: aiohttp.ClientSession, server: Server, timeout_s: float) -> bool:
        return self.alive.pop(0) if len(self.alive) > 1 else self.alive[0]

    def spawn(self, work: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.append(task)
        return task

    async def settle(self) -> None:
        while pending := [task for task in self.tasks if not task.done()]:
            await asyncio.wait(pending)


def test_a_refused_connection_on_a_dead_server_requeues_the_row_for_free_and_takes_it_out() -> None:
    async def main() -> Job:
        job = Job(alive=[False, True])
        job.health.failed(job.server, 0, REFUSED)
        job.health.failed(job.server, 1, REFUSED)  # the same probe decides for both
        await job.settle()
        return job

    job = asyncio.run(main())
    assert job.rows.requests.attempts == {} and list(job.rows.queue.ready) == [1, 0]
    assert job.stats.retries_by_cause == {SERVER_DOWN: 2}
    assert job.said == [
        "server 127.0.0.1:1 taken out (connection failed: refused); its rows go back to the queue",
        "server 127.0.0.1:1 answers again; back in rotation",
    ]
    assert job.server.healthy and job.server.taken_out_count == 1


def test_a_refused_connection_on_a_live_server_was_the_rows_attempt() -> None:
    async def main() -> Job:
        job = Job(alive=[True])
        job.health.failed(job.server, 0, REFUSED)
        await job.settle()
        return job

    job = asyncio.run(main())
    assert job.rows.requests.attempts == {0: 1} and job.server.taken_out_count == 0
    assert [position for _, position in job.rows.queue.waiting] == [0]


def test_server_faults_in_a_row_take_the_server_out_and_its_rows_in_flight_go_back() -> None:
    async def main() -> Job:
        job = Job(alive=[True])
        job.server.in_flight[3] = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        bad_gateway = RequestFailed(FailureKind.RETRYABLE, "HTTP 502: bad gateway", status=502)
        for position in range(FAILURES_BEFORE_TAKE_OUT):
            job.health.failed(job.server, position % 3, bad_gateway)
        await job.settle()
        return job

    job = asyncio.run(main())
    assert job.server.taken_out_count == 1 and 3 in job.rows.queue.ready  # the row in flight: free
    assert job.rows.requests.attempts == {0: 2, 1: 2, 2: 1}  # each answer was its row's attempt
    assert job.said[0] == (
        f"server 127.0.0.1:1 taken out ({FAILURES_BEFORE_TAKE_OUT} failures in a row, the last: "
        "HTTP 502: bad gateway); its rows go back to the queue"
    )


def test_a_server_taken_out_each_time_it_rejoins_idle_is_out_for_good_and_the_job_says_why() -> None:
    job = Job(alive=[True])
    # taken out once, then back and taken out again without finishing a request, one short
    job.server.idle_rejoins = IDLE_REJOINS_LIMIT - 1
    job.server.rejoined_at_done = job.server.done_rows

    async def main() -> None:
        job.health.take_out(job.server, "HTTP 502")
        await job.settle()

    asyncio.run(main())
    assert job.tasks == []  # not probed any more
    (why,) = job.health.out_for_good
    assert why == (
        f"server 127.0.0.1:1 is out for good: taken out {IDLE_REJOINS_LIMIT + 1} times in a row, each "
        "time after rejoining without finishing a request (the last: HTTP 502)"
    )
    assert job.said == [why]
    assert job.health.why_stop(0.0) == f"no server is left to send to: {why}"
    assert job.health.no_server_left == why


def test_every_server_down_pauses_says_so_once_and_gives_up_after_the_limit() -> None:
    job = Job(alive=[False])
    job.server.healthy = False
    assert job.health.why_stop(0.0) is None and job.health.why_stop(5.0) is None
    assert job.said == ["every server is down: paused (no retries spent) while probing"]
    assert job.stats.paused_reason == "every server is down; probing, no retries spent"
    never_answered = job.health.why_stop(10.5)
    assert never_answered is not None and never_answered.startswith(
        "no server has answered since the job started (10 s)"
    )
    job.stats.answered("127.0.0.1:1", 1.0, 1, 1)  # it had answered: the whole --give-up-after-s
    assert job.health.why_stop(10.5) is None
    job.server.healthy = True
    assert job.health.why_stop(11.0) is None and job.stats.paused_reason is None
    job.server.healthy = False
    assert job.health.why_stop(200.0) is None  # down again: the wait starts again
    gave_up = job.health.why_stop(300.5)
    assert gave_up is not None and gave_up.startswith("every server was down for 100 s")
    assert len(job.said) == 2
