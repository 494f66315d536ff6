"""Dispatching rows to servers: the asynchronous half of a generate job.

Per request the path is short on purpose (the driver must stay far below the engines'
speed): a task per request, `_fill` starting the next one where the last one ends, the
answer turned into a row and buffered for the writer; everything else (retries coming
due, the request-timeout watchdog, the all-down pause, ledger commits, metrics) runs on
slower ticks. Every task is a child of one task group (`tasks.JobTasks`): an error in
any of them ends the job with a line that names it.

The dispatcher wires the concerns together, each its own module (see the package's docstring).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Iterator, Sequence

import aiohttp

from specpilot.generate.dispatch.acceptance import AcceptanceWatch
from specpilot.generate.dispatch.answers import Answers
from specpilot.generate.dispatch.client import ChatClient, RequestFailed
from specpilot.generate.dispatch.commits import Committer
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.dispatch.health import NEVER_ANSWERED_GIVE_UP_S, AllDownPause, ServerHealth
from specpilot.generate.dispatch.policy import ClientFactory, Companion, DispatchPolicy
from specpilot.generate.dispatch.retries import RowRetries
from specpilot.generate.dispatch.servers import Server, ServerPool, probe
from specpilot.generate.dispatch.state import InFlight, RowQueue, Stopping
from specpilot.generate.dispatch.stats import LiveStats, ProgressView
from specpilot.generate.dispatch.tasks import JobTasks
from specpilot.generate.dispatch.watchdog import RequestWatchdog
from specpilot.generate.ledger.report import summarize
from specpilot.generate.ledger.store import Ledger
from specpilot.generate.rows.output import TurnResult, is_complete, messages_for
from specpilot.generate.rows.types import PromptRow, RejectedRow
from specpilot.generate.sampling import Sampling
from specpilot.generate.writers.parts import PartWriter, Split
from specpilot.generate.yields import YieldGuard
from specpilot.interrupts import taken_by

TICK_S = 0.05


def _pool(endpoints: Sequence[Endpoint], concurrency: int) -> ServerPool:
    return ServerPool(
        [e.base_url for e in endpoints],
        concurrency,
        {e.base_url: e.slots for e in endpoints if e.router},
        {e.base_url: e.group for e in endpoints if e.group},
    )


class Dispatcher:
    """The asynchronous part: feed rows to servers, handle answers and failures."""

    def __init__(
        self,
        policy: DispatchPolicy,
        endpoints: Sequence[Endpoint],
        session: aiohttp.ClientSession,
        model: str,
        sampling: Sampling,
        ledger: Ledger,
        rows: Iterator[PromptRow | RejectedRow],
        writers: dict[Split, PartWriter],
        client_factory: ClientFactory | None = None,
        guard: YieldGuard | None = None,
    ) -> None:
        """`rows`: the input rows to send; `writers`: one per split, closed when `run` ends;
        `guard`: sees every finished row and stops the job whose yield is under its floor."""
        self.policy, self.ledger = policy, ledger
        self.client = (client_factory or ChatClient)(session, model, sampling)
        self.pool = _pool(endpoints, policy.concurrency)
        self.queue = RowQueue(
            rows, max(1024, 4 * policy.concurrency * sum(s.slots for s in self.pool.servers))
        )
        self.requests = InFlight()
        self.stopping = Stopping()
        self.tasks = JobTasks(lambda what: self.stopping.stop(f"stopped by an error in {what}"))
        self.stats = LiveStats()
        self.view: ProgressView | None = None
        self.rows = RowRetries(policy.retry, self.queue, self.requests, self.stats, self.stopping.stop)
        self.watchdog = RequestWatchdog(
            policy.request_timeout_s, self.requests.sent_at, policy.stall_after_s, policy.names.stall_after_s
        )
        pause = AllDownPause(policy.give_up_after_s, NEVER_ANSWERED_GIVE_UP_S, policy.names.give_up_after_s)
        self.health = ServerHealth(
            self.pool, self.rows, probe, session, policy, pause, self.stats, self.tasks.spawn, self._say
        )
        self.guard = guard
        self.answers = Answers(
            model, sampling, policy.keep_given_turns, writers, self.stats, self._say, self.stopping.stop,
            guard, self._guard_stop,
        )  # fmt: skip
        self.committer = Committer(ledger, writers, self.rows.take_batch, self._say)
        self.acceptance = AcceptanceWatch(session, self.pool, self.stats, ledger, policy.probe_timeout_s)

    @property
    def stop_reason(self) -> str | None:
        return self.stopping.reason

    @property
    def signalled(self) -> bool:
        return self.stopping.signalled

    @property
    def out_for_good(self) -> list[str]:
        """Why each server left for good."""
        return self.health.out_for_good

    @property
    def no_server_left(self) -> str | None:
        """Why the job ended for want of servers (every one out for good), or None."""
        return self.health.no_server_left

    @property
    def clock_jump_s(self) -> float:
        """The largest jump of the wall clock seen in the job, either way (0: none)."""
        return self.committer.clock.jump_s

    def accept_length(self) -> float | None:
        return self.acceptance.accept_length()

    async def run(self, companions: Sequence[Companion] = ()) -> None:
        """Send every row; returns when all are done or the job stops, raises what ended it."""
        if self.policy.progress_interval_s is not None:
            self.view = ProgressView(
                self.stats,
                self.pool,
                self.accept_length,
                lambda: summarize(self.ledger, running=True),
                interval_s=self.policy.progress_interval_s,
            )
        try:
            # SIGINT, SIGTERM and SIGHUP come here while the job runs (the command's handling after)
            with taken_by(self._interrupt) if self.policy.drain_on_signal else contextlib.nullcontext():
                await self.tasks.run(self._main(companions), "the dispatch loop")
        finally:
            try:
                self.committer.close(job_failed=self.tasks.failed)
            finally:
                if self.view is not None:
                    self.view.stop()

    async def _main(self, companions: Sequence[Companion]) -> None:
        for work, what in companions:
            self.tasks.spawn(work, what)
        self.tasks.spawn(
            self.committer.loop(self.policy.flush_interval_s, self._tick), "the ledger flush loop"
        )
        self.tasks.spawn(self.acceptance.loop(self.policy.metrics_interval_s), "the metrics poll loop")
        await self._dispatch_loop()
        await self.acceptance.scrape()

    def _interrupt(self, sig: signal.Signals) -> None:
        if self.stopping.interrupted(sig):
            self._say(
                f"{sig.name}: finishing the {self.pool.total_in_flight()} requests in "
                "flight, then stopping (send it again to stop at once)"
            )

    def stop_for(self, reason: str) -> None:
        """Stop now for a reason found outside the job (a run it drives crashed)."""
        self.stopping.stop(reason)

    def restart_on_stall(self, restart: Callable[[str, str], None] | None) -> None:
        """A healer restarts a stalled server: `restart(base_url, why)` is told, and the healer
        calls `restarted(base_url)` once it serves again (until then the job sends it nothing).
        None: the healer ended; a server it was to restart is out."""
        self.health.restart_on_stall(restart)

    def restarted(self, base_url: str) -> None:
        self.health.restarted(base_url)

    def _guard_stop(self, reason: str) -> None:
        self.stopping.drain(reason)
        self._say(
            f"yield guard: the clean yield is under its floor; sending no new rows, finishing the "
            f"{self.pool.total_in_flight()} in flight"
        )

    def note(self, message: str) -> None:
        """Tell the user something from outside the job."""
        self._say(message)

    async def _dispatch_loop(self) -> None:
        """Housekeeping tick: due retries, completion, the request timeout, the all-down pause.

        New requests are mostly started by `_fill` right where a request finishes, so
        the per-request path creates no extra timer; this loop only needs to look every
        `TICK_S`.
        """
        while self._ticking():
            now = time.monotonic()
            self.queue.release_due(now)
            self._fill()
            if not self._work_left():
                return
            for server, stall in self.watchdog.look(now, self.pool.servers):
                self.health.stalled(server, stall)
            why = self.health.why_stop(now)
            if why is not None:
                self.stopping.stop(why)
                return
            await asyncio.sleep(self._tick_wait_s(now))

    def _ticking(self) -> bool:
        """Whether the loop goes on: no stop now, and a drain still has requests in flight."""
        stopping = self.stopping
        return not (stopping.now or (stopping.reason and not self.pool.total_in_flight()))

    def _work_left(self) -> bool:
        """Rows to send (ready or waiting to retry), a server parked for a probe, or requests out."""
        queue = self.queue
        return bool(queue.ready or queue.waiting or self.health.probes.parked or self.pool.total_in_flight())

    def _tick_wait_s(self, now: float) -> float:
        """Until the next tick: TICK_S, or sooner when a retry is due."""
        next_due_s = self.queue.waiting[0][0] - now if self.queue.waiting else TICK_S
        return max(min(next_due_s, TICK_S), 0.0)

    def _fill(self) -> None:
        """Start requests while a server has room and there is work."""
        if self.stopping.reason is not None:
            return
        pick, queue, ready = self.pool.pick, self.queue, self.queue.ready
        while True:
            if not ready:
                queue.refill()
                if not ready:
                    return
            server = pick()
            if server is None:
                return
            self._start(server, ready.popleft())

    def _start(self, server: Server, position: int) -> None:
        row = self.queue.rows[position]
        task = self.tasks.spawn(self._attempt(server, row), f"the request task for row {row.row_id}")
        if task is None:  # the job is ending; the row is sent again by the next run
            return
        self.rows.started(position)
        server.in_flight[position] = task
        self.requests.sent_at[position] = time.monotonic()

    async def _attempt(self, server: Server, row: PromptRow) -> None:
        requests, position = self.requests, row.position
        me = asyncio.current_task()
        try:
            try:
                done = requests.turns_done.setdefault(position, [])
                while not is_complete(row, done):
                    sent_at = requests.sent_at[position] = time.monotonic()
                    answer = await self.client.complete(server.base_url, messages_for(row, done), row.tools)
                    server.progress_at = answered_at = time.monotonic()
                    done.append(TurnResult(answer, server.name, answered_at - sent_at))
                    self.watchdog.stall.took(answered_at - sent_at)
                    self.health.served()
            except (asyncio.CancelledError, RequestFailed):
                # the watchdog's cancel can surface as a client error (a drip-fed body): either way
                # it was the timeout, and the mark must not outlive this attempt
                timed_out = self.watchdog.settle(position)
                if server.in_flight.get(position) is not me:
                    # taken out meanwhile: the take-out requeued the row, and it may be out again
                    raise asyncio.CancelledError from None
                if not timed_out:
                    raise
                raise self.watchdog.timeout() from None
        except RequestFailed as failure:
            del server.in_flight[position]
            self.health.failed(server, position, failure)
        except asyncio.CancelledError:
            if server.in_flight.get(position) is me:
                raise  # the job is ending
        else:
            self.watchdog.settle(position)
            if server.in_flight.get(position) is not me:
                return  # taken out as it answered: the row was requeued and is sent again
            del server.in_flight[position]
            self.pool.record_success(server)
            self._on_answer(row, requests.turns_done.pop(position))
        finally:
            self._fill()

    def _on_answer(self, row: PromptRow, done: list[TurnResult]) -> None:
        self.answers.add(row, done)
        del self.queue.rows[row.position]
        self.requests.forget(row.position)
        if self.answers.buffered() >= self.policy.flush_rows:
            self.committer.flush()

    def _say(self, message: str) -> None:
        if self.view is not None:
            self.view.say(message)

    def _tick(self) -> None:
        if self.view is not None:
            self.view.tick()
