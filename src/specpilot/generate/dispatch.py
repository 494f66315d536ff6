"""Dispatching rows to servers: the asynchronous half of a generate job.

Per request the path is short on purpose (the driver must stay far below the engines'
speed): a task per request, `_fill` starting the next one where the last one ends, the
answer turned into a row and buffered for the writer; everything else (retries coming
due, the request-timeout watchdog, the all-down pause, ledger commits, metrics) runs on
slower ticks.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import signal
import time
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import aiohttp

from specpilot.generate.client import ChatClient, FailureKind, RequestFailed, Sampling
from specpilot.generate.inputs import iter_rows
from specpilot.generate.ledger import LedgerBatch, RowState
from specpilot.generate.rows import TurnResult, build_row, is_complete, messages_for
from specpilot.generate.servers import (
    Server,
    ServerPool,
    SpecTracker,
    probe,
    router_workers_ready,
    scrape_metrics,
)
from specpilot.generate.stats import LiveStats, ProgressView
from specpilot.generate.types import PromptRow
from specpilot.generate.validate import flag_bits
from specpilot.generate.writer import CLEAN, FLAGGED, PartWriter

if TYPE_CHECKING:
    from specpilot.generate.job import Job

TICK_S = 0.05
FAILURES_BEFORE_SUCCESS_LIMIT = 50


def _backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Full jitter: uniform over [0, min(cap, base * 2^(attempt-1))]."""
    return random.uniform(0.0, min(cap_s, base_s * 2 ** (attempt - 1)))


class Dispatcher:
    """The asynchronous part: feed rows to servers, handle answers and failures."""

    def __init__(self, job: Job, session: aiohttp.ClientSession, sampling: Sampling) -> None:
        self.job, self.config, self.session = job, job.config, session
        self.sampling = sampling
        self.client = ChatClient(session, sampling)
        self.pool = ServerPool(
            [e.base_url for e in self.config.endpoints],
            self.config.concurrency,
            {e.base_url: e.slots for e in self.config.endpoints if e.router},
        )
        commits = job.ledger.part_commits()
        self.writers = {
            split: PartWriter(
                job.config.output_dir / split.directory, commits, self.config.rows_per_part, split.first_part
            )
            for split in (CLEAN, FLAGGED)
        }
        self.batch = LedgerBatch.empty()
        self.rows: dict[int, PromptRow] = {}
        # Target turns done so far of rows not yet written. Kept in memory only: a row is
        # written and committed once, whole; after a kill its turns are generated again.
        self.partial: dict[int, list[TurnResult]] = {}
        self.ready: deque[int] = deque()
        self.waiting: list[tuple[float, int]] = []  # (monotonic due time, position)
        self.attempts: dict[int, int] = {}
        self.input = iter_rows(job.source, job.pending, keep_given_turns=self.config.keep_given_turns)
        self.input_done = False
        self.window = max(1024, 4 * self.config.concurrency * sum(s.slots for s in self.pool.servers))
        self.spec = SpecTracker()
        self.probing: set[str] = set()
        self.parked: dict[str, list[tuple[int, RequestFailed]]] = {}
        self.sent_at: dict[int, float] = {}
        self.overdue: set[int] = set()
        self.stop_reason: str | None = None
        self.stop_now = False  # False while stopping: let the requests in flight finish
        self.fatal: BaseException | None = None
        counts = job.ledger.counts()
        done_before, failed_before = counts[RowState.DONE], counts[RowState.FAILED]
        in_scope = len(job.pending) + done_before + failed_before
        self.stats = LiveStats(in_scope, done_before, failed_before)
        self.view: ProgressView | None = None
        self.background: list[asyncio.Task[None]] = []

    def accept_length(self) -> float | None:
        from_metrics = self.spec.mean_accept_length()
        if from_metrics is not None:
            return from_metrics
        if self.stats.accept_length_rows:
            return self.stats.accept_length_sum / self.stats.accept_length_rows
        return None

    async def run(self) -> None:
        if self.config.show_progress:
            self.view = ProgressView(
                self.stats, self.pool, self.accept_length, interval_s=self.config.progress_interval_s
            )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._interrupt, sig)
        self._spawn(self._flush_loop())
        self._spawn(self._metrics_loop())
        try:
            await self._dispatch_loop()
            if self.fatal is not None:
                raise self.fatal
            await self._scrape_metrics()
        finally:
            tasks = [*self.background, *(t for s in self.pool.servers for t in s.in_flight.values())]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            try:
                self.flush()
            except Exception:
                # The job already failed (self.fatal is raised): a flush failing the same
                # way must not hide it. Unflushed rows stay in flight and are sent again.
                if self.fatal is None:
                    raise
            finally:
                for writer in self.writers.values():
                    writer.close()
                if self.view is not None:
                    self.view.stop()
        if self.fatal is not None:
            raise self.fatal  # a task failed after the loop ended (the last flush, a metrics scrape)

    def _interrupt(self, sig: signal.Signals) -> None:
        """First signal: send nothing new, let requests in flight finish. Second: stop now."""
        if self.stop_reason is None:
            self.stop_reason = f"interrupted by {sig.name}; run the same command again to resume"
            self._say(
                f"{sig.name}: finishing the {self.pool.total_in_flight()} requests in "
                "flight, then stopping (send it again to stop at once)"
            )
        else:
            self.stop_now = True

    def _stop(self, reason: str) -> None:
        self.stop_reason, self.stop_now = reason, True

    def stop_for(self, reason: str) -> None:
        """Stop now for a reason found outside the job (a run it drives crashed)."""
        self._stop(reason)

    def note(self, message: str) -> None:
        """Tell the user something from outside the job."""
        self._say(message)

    async def _dispatch_loop(self) -> None:
        """Housekeeping tick: due retries, completion, the all-down pause.

        New requests are mostly started by `_fill` right where a request finishes, so
        the per-request path creates no extra task or timer; this loop only needs to
        look every `TICK_S`.
        """
        pool = self.pool
        down_since: float | None = None
        last_watchdog = time.monotonic()
        while not (self.stop_now or (self.stop_reason and not pool.total_in_flight())):
            now = time.monotonic()
            while self.waiting and self.waiting[0][0] <= now:
                self.ready.append(heapq.heappop(self.waiting)[1])
            self._fill()
            if not (self.ready or self.waiting or self.parked or pool.total_in_flight()):
                return
            if now - last_watchdog >= 1.0:
                last_watchdog = now
                self._cancel_overdue(now)
            if pool.all_down():
                if down_since is None:
                    down_since = now
                    self._say("every server is down: paused (no retries spent) while probing")
                self.stats.paused_reason = "every server is down; probing, no retries spent"
                if now - down_since > self.config.give_up_after_s:
                    self._stop(f"every server was down for {self.config.give_up_after_s:.0f} s; gave up")
                    return
            else:
                down_since = None
                self.stats.paused_reason = None
            next_due_s = self.waiting[0][0] - now if self.waiting else TICK_S
            await asyncio.sleep(max(min(next_due_s, TICK_S), 0.0))

    def _fill(self) -> None:
        """Start requests while a server has room and there is work."""
        if self.stop_reason is not None:
            return
        pick, ready = self.pool.pick, self.ready
        while True:
            if not ready:
                self._refill()
                if not ready:
                    return
            server = pick()
            if server is None:
                return
            self._start(server, ready.popleft())

    def _refill(self) -> None:
        while not self.input_done and len(self.rows) < self.window:
            row = next(self.input, None)
            if row is None:
                self.input_done = True
                return
            if not isinstance(row, PromptRow):
                continue  # rejected when the job was listed; never pending
            self.rows[row.position] = row
            self.ready.append(row.position)

    def _start(self, server: Server, position: int) -> None:
        self.batch.started.append(position)
        task = asyncio.create_task(self._attempt(server, self.rows[position]))
        task.add_done_callback(self._supervise)
        server.in_flight[position] = task
        self.sent_at[position] = time.monotonic()

    def _cancel_overdue(self, now: float) -> None:
        """The request timeout: cancel requests older than it (see client.open_session)."""
        limit_s = self.config.request_timeout_s
        for server in self.pool.servers:
            for position, task in server.in_flight.items():
                overdue = now - self.sent_at.get(position, now) > limit_s
                if overdue and position not in self.overdue:
                    self.overdue.add(position)
                    task.cancel()

    async def _attempt(self, server: Server, row: PromptRow) -> None:
        try:
            try:
                done = self.partial.setdefault(row.position, [])
                while not is_complete(row, done):
                    sent_at = self.sent_at[row.position] = time.monotonic()
                    answer = await self.client.complete(server.base_url, messages_for(row, done), row.tools)
                    done.append(TurnResult(answer, server.name, time.monotonic() - sent_at))
            except asyncio.CancelledError:
                if row.position not in self.overdue:
                    raise  # taken out or shutting down: whoever cancelled requeues the row
                self.overdue.discard(row.position)
                raise RequestFailed(
                    FailureKind.TIMEOUT, f"request timed out after {self.config.request_timeout_s:g} s"
                ) from None
        except RequestFailed as failure:
            server.in_flight.pop(row.position, None)
            self._on_failure(server, row, failure)
        else:
            server.in_flight.pop(row.position, None)
            self.pool.record_success(server)
            self._on_answer(row, self.partial.pop(row.position))
        finally:
            self._fill()

    def _on_answer(self, row: PromptRow, done: list[TurnResult]) -> None:
        output = build_row(
            row,
            done,
            model=self.sampling.model,
            thinking=self.sampling.thinking,
            keep_given_turns=self.config.keep_given_turns,
        )
        meta = output["meta"]
        for result in done:
            if result.answer.spec_accept_length is not None:
                self.stats.accept_length_sum += result.answer.spec_accept_length
                self.stats.accept_length_rows += 1
        writer = self.writers[FLAGGED if meta["flags"] else CLEAN]
        writer.add(
            output,
            row.position,
            meta["prompt_tokens"],
            meta["completion_tokens"],
            flag_bits(meta["flags"]),
            time.time(),
        )
        del self.rows[row.position]
        self.sent_at.pop(row.position, None)
        # One row, however many turns: the last turn's server, the time its requests took.
        latency_s = sum(result.latency_s for result in done)
        self.stats.answered(done[-1].server, latency_s, meta["prompt_tokens"], meta["completion_tokens"])
        if sum(len(w) for w in self.writers.values()) >= self.config.flush_rows:
            self.flush()

    def _on_failure(self, server: Server, row: PromptRow, failure: RequestFailed) -> None:
        if failure.kind in (FailureKind.CONNECTION, FailureKind.TIMEOUT):
            if not server.healthy:
                self._requeue(row.position)
                return
            # Is it the row or the server? A probe decides: a dead server's rows go
            # back to the queue for free; on a live server it was this row's attempt.
            self.parked.setdefault(server.name, []).append((row.position, failure))
            self._probe_soon(server)
            return
        self._retry_or_fail(row.position, failure)

    def _retry_or_fail(self, position: int, failure: RequestFailed) -> None:
        row = self.rows[position]
        attempts = self.attempts.get(row.position, 0) + 1
        self.attempts[row.position] = attempts
        if failure.kind is FailureKind.FATAL or attempts >= self.config.max_attempts:
            self.batch.failed.append((str(failure), row.position))
            del self.rows[row.position]
            self.partial.pop(row.position, None)
            self.sent_at.pop(row.position, None)
            self.stats.row_failed(str(failure))
            if self.stats.done == 0 and self.stats.failed >= FAILURES_BEFORE_SUCCESS_LIMIT:
                # A wrong --model or a broken server fails every row the same way; stop
                # before the whole input is marked failed.
                self._stop(
                    f"the first {self.stats.failed} rows all failed (last: "
                    f"{failure}); fix the cause, then rerun with --retry-failed"
                )
            return
        self.batch.retried.append((str(failure), row.position))
        self.stats.retried(str(failure))
        delay = _backoff_s(attempts, self.config.retry_base_s, self.config.retry_cap_s)
        if failure.retry_after_s is not None:
            delay = max(delay, min(failure.retry_after_s, self.config.retry_cap_s))
        heapq.heappush(self.waiting, (time.monotonic() + delay, row.position))

    def _requeue(self, position: int) -> None:
        self.stats.requeued_from_down_server()
        self.ready.appendleft(position)

    def _take_out(self, server: Server, reason: str) -> None:
        for position in self.pool.take_out(server):
            self._requeue(position)
        self._say(f"server {server.name} taken out ({reason}); its rows go back to the queue")
        self._probe_until_back(server)

    def _probe_soon(self, server: Server) -> None:
        if server.name in self.probing:
            return

        async def check() -> None:
            try:
                alive = await probe(self.session, server, self.config.probe_timeout_s)
            finally:
                self.probing.discard(server.name)
            parked = self.parked.pop(server.name, [])
            if alive or not server.healthy:
                for position, failure in parked:
                    if alive:
                        self._retry_or_fail(position, failure)
                    else:
                        self._requeue(position)
            else:
                reason = str(parked[-1][1]) if parked else "health probe failed"
                for position, _ in parked:
                    self._requeue(position)
                self._take_out(server, reason)

        self.probing.add(server.name)
        self._spawn(check())

    def _probe_until_back(self, server: Server) -> None:
        async def loop() -> None:
            delay_s = 0.5
            while not await probe(self.session, server, self.config.probe_timeout_s):
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, self.config.probe_cap_s)
            self.pool.bring_back(server)
            self._say(f"server {server.name} answers again; back in rotation")

        self._spawn(loop())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.background = [task for task in self.background if not task.done()]
        task = asyncio.create_task(work)
        task.add_done_callback(self._supervise)
        self.background.append(task)

    def _supervise(self, task: asyncio.Task[None]) -> None:
        """Every task's end: an error (a bug, a full disk) ends the job, raised by `run`.

        Without this an exception would end only its task ("Task exception was never
        retrieved") and leave its row in flight for ever, so the job would never finish.
        Rows in flight when the job ends stay in flight in the ledger; the next run
        sends them again.
        """
        if task.cancelled() or task.exception() is None:
            return
        if self.fatal is None:
            self.fatal = task.exception()
        self._stop(f"stopped by an error: {self.fatal}")

    def _say(self, message: str) -> None:
        if self.view is not None:
            self.view.say(message)

    def flush(self) -> None:
        """Make answers durable, then commit them with the other changes to the ledger."""
        batch, self.batch = self.batch, LedgerBatch.empty()
        for writer in self.writers.values():
            durable = writer.flush()
            batch.done += durable.done
            batch.parts += durable.parts
        self.job.ledger.apply(batch)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_s)
            self.flush()
            if self.view is not None:
                self.view.tick()

    async def _metrics_loop(self) -> None:
        while True:
            await self._scrape_metrics()
            await asyncio.sleep(self.config.metrics_interval_s)

    async def _scrape_metrics(self) -> None:
        for server in self.pool.servers:
            if server.router:
                # members come and go (fleet-repair): the room follows the router's list
                ready = await router_workers_ready(self.session, server, self.config.probe_timeout_s)
                if ready:
                    server.slots = ready
            if server.healthy:
                values = await scrape_metrics(self.session, server, self.config.probe_timeout_s)
                if values is not None:
                    self.spec.observe(server.name, values)
        accept = self.accept_length()
        if accept is not None:
            self.job.ledger.set_meta({"spec_accept_length": f"{accept:.4f}"})
