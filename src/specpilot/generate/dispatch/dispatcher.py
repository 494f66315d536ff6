"""Dispatching rows to servers: the asynchronous half of a generate job.

Per request the path is short on purpose (the driver must stay far below the engines'
speed): a task per request, `_fill` starting the next one where the last one ends, the
answer turned into a row and buffered for the writer; everything else (retries coming
due, the request-timeout watchdog, the all-down pause, ledger commits, metrics) runs on
slower ticks. Every task is a child of one task group (`tasks.JobTasks`): an error in
any of them ends the job with a line that names it.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator, Sequence

import aiohttp

from specpilot.generate.dispatch.client import ChatClient, FailureKind, RequestFailed
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.dispatch.policy import ClientFactory, Companion, DispatchPolicy
from specpilot.generate.dispatch.servers import (
    Server,
    ServerPool,
    SpecTracker,
    probe,
    router_workers_ready,
    scrape_metrics,
)
from specpilot.generate.dispatch.state import InFlight, Probes, RowQueue, Stopping
from specpilot.generate.dispatch.stats import LiveStats, ProgressView
from specpilot.generate.dispatch.tasks import JobTasks
from specpilot.generate.ledger.report import CLOCK_JUMP_KEY, summarize
from specpilot.generate.ledger.store import Ledger, LedgerBatch
from specpilot.generate.rows.output import TurnResult, build_row, is_complete, messages_for
from specpilot.generate.rows.thinking import ReasoningWatch
from specpilot.generate.rows.types import PromptRow, RejectedRow
from specpilot.generate.rows.validate import flag_bits
from specpilot.generate.sampling import Sampling
from specpilot.generate.writers.parts import CLEAN, FLAGGED, PartWriter, Split

TICK_S = 0.05
FAILURES_BEFORE_SUCCESS_LIMIT = 50
#: 429 and 503 "overloaded" answers a row may back off from without spending an attempt
OVERLOAD_RETRIES_PER_ROW = 20
#: the statuses that say "slow down", not "this row is bad"
OVERLOAD_STATUSES = frozenset({429, 503})
#: wall clock moving this far from the monotonic clock is a jump (NTP slews far less)
CLOCK_JUMP_S = 60.0
#: flushing takes at most about 1/this of the job's time (fsync and a ledger commit each)
FLUSH_COST_FACTOR = 10
FLUSH_MIN_WAIT_S = 0.02
#: a taken-out router is probed this often, not with backoff: the job rejoins within this
#: of the router answering again (fleet-repair restarts it in seconds)
ROUTER_PROBE_INTERVAL_S = 0.25

#: --give-up-after-s is for outages of servers that worked; one that never answered gives up sooner
NEVER_ANSWERED_GIVE_UP_S = 60.0


def give_up_reason(down_for_s: float, give_up_after_s: float, never_answered: bool) -> str | None:
    """Why the job stops after every server has been down `down_for_s`; None: keep probing.
    A server that never answered is most likely a wrong address, not an outage: sooner."""
    limit_s = min(give_up_after_s, NEVER_ANSWERED_GIVE_UP_S) if never_answered else give_up_after_s
    if down_for_s <= limit_s:
        return None
    if never_answered:
        return (
            f"no server has answered since the job started ({limit_s:g} s); check the "
            "--server / --run addresses and that the servers are up"
        )
    return (
        f"every server was down for {limit_s:g} s (--give-up-after-s); gave up: run the "
        "same command again once a server is up (the rows left are kept)"
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
    ) -> None:
        """`rows`: the input rows to send; `writers`: one per split, closed when `run` ends."""
        self.policy, self.session, self.model, self.sampling = policy, session, model, sampling
        self.ledger, self.writers = ledger, writers
        self.client = (client_factory or ChatClient)(session, model, sampling)
        self.reasoning = ReasoningWatch(model, thinking=sampling.thinking)
        self.usage_missing_said = False  # the warning of answers without `usage`, said once
        self.pool = ServerPool(
            [e.base_url for e in endpoints],
            policy.concurrency,
            {e.base_url: e.slots for e in endpoints if e.router},
            {e.base_url: e.group for e in endpoints if e.group},
        )
        self.queue = RowQueue(
            rows, max(1024, 4 * policy.concurrency * sum(s.slots for s in self.pool.servers))
        )
        self.requests = InFlight()
        self.probes = Probes()
        self.stopping = Stopping()
        self.batch = LedgerBatch.empty()
        self.spec = SpecTracker()
        self.tasks = JobTasks(lambda what: self._stop(f"stopped by an error in {what}"))
        self.stats = LiveStats()
        self.view: ProgressView | None = None
        #: wall clock minus monotonic clock at the start: rows' done_at (and so the summary's
        #: elapsed_s and overall rates) follow the wall clock, which can jump
        self._clock_offset_s = time.time() - time.monotonic()
        self.clock_jump_s = 0.0  # the largest jump seen, either way
        #: why each server left for good; once every server has, `no_server_left` says why
        self.out_for_good: list[str] = []
        self.no_server_left: str | None = None

    @property
    def stop_reason(self) -> str | None:
        return self.stopping.reason

    def accept_length(self) -> float | None:
        from_metrics = self.spec.mean_accept_length()
        if from_metrics is not None:
            return from_metrics
        if self.stats.accept_length_rows:
            return self.stats.accept_length_sum / self.stats.accept_length_rows
        return None

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
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._interrupt, sig)
        try:
            await self.tasks.run(self._main(companions), "the dispatch loop")
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            try:
                self.flush()
            except Exception:
                # The job already failed (its error is being raised): a flush failing the
                # same way must not hide it. Unflushed rows stay in flight and are sent again.
                if not self.tasks.failed:
                    raise
            finally:
                for writer in self.writers.values():
                    writer.close()
                if self.view is not None:
                    self.view.stop()

    async def _main(self, companions: Sequence[Companion]) -> None:
        for work, what in companions:
            self.tasks.spawn(work, what)
        self.tasks.spawn(self._flush_loop(), "the ledger flush loop")
        self.tasks.spawn(self._metrics_loop(), "the metrics poll loop")
        await self._dispatch_loop()
        await self._scrape_metrics()

    def _interrupt(self, sig: signal.Signals) -> None:
        """First signal: send nothing new, let requests in flight finish. Second: stop now."""
        if self.stopping.reason is None:
            self.stopping.reason = f"interrupted by {sig.name}; run the same command again to resume"
            self._say(
                f"{sig.name}: finishing the {self.pool.total_in_flight()} requests in "
                "flight, then stopping (send it again to stop at once)"
            )
        else:
            self.stopping.now = True

    def _stop(self, reason: str) -> None:
        self.stopping.reason, self.stopping.now = reason, True

    def stop_for(self, reason: str) -> None:
        """Stop now for a reason found outside the job (a run it drives crashed)."""
        self._stop(reason)

    def note(self, message: str) -> None:
        """Tell the user something from outside the job."""
        self._say(message)

    async def _dispatch_loop(self) -> None:
        """Housekeeping tick: due retries, completion, the all-down pause.

        New requests are mostly started by `_fill` right where a request finishes, so
        the per-request path creates no extra timer; this loop only needs to look every
        `TICK_S`.
        """
        pool, queue, stopping = self.pool, self.queue, self.stopping
        down_since: float | None = None
        last_watchdog = time.monotonic()
        while not (stopping.now or (stopping.reason and not pool.total_in_flight())):
            now = time.monotonic()
            queue.release_due(now)
            self._fill()
            if not (queue.ready or queue.waiting or self.probes.parked or pool.total_in_flight()):
                return
            if now - last_watchdog >= 1.0:
                last_watchdog = now
                self._cancel_overdue(now)
            if pool.all_out_for_good():
                # nothing can serve the rest: the job ends, and its rows fail with this reason
                self.no_server_left = "; ".join(self.out_for_good)
                self._stop(f"no server is left to send to: {self.no_server_left}")
                return
            if pool.all_down():
                if down_since is None:
                    down_since = now
                    self._say("every server is down: paused (no retries spent) while probing")
                self.stats.paused_reason = "every server is down; probing, no retries spent"
                never = self.stats.done == 0 and self.stats.failed == 0
                gave_up = give_up_reason(now - down_since, self.policy.give_up_after_s, never)
                if gave_up is not None:
                    self._stop(gave_up)
                    return
            else:
                down_since = None
                self.stats.paused_reason = None
            next_due_s = queue.waiting[0][0] - now if queue.waiting else TICK_S
            await asyncio.sleep(max(min(next_due_s, TICK_S), 0.0))

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
        self.batch.started.append(position)
        self.batch.waiting.discard(position)
        server.in_flight[position] = task
        self.requests.sent_at[position] = time.monotonic()

    def _cancel_overdue(self, now: float) -> None:
        """The request timeout: cancel requests older than it (see client.open_session)."""
        limit_s, sent_at, overdue = (
            self.policy.request_timeout_s,
            self.requests.sent_at,
            self.requests.overdue,
        )
        for server in self.pool.servers:
            for position, task in server.in_flight.items():
                if now - sent_at.get(position, now) > limit_s and position not in overdue:
                    overdue.add(position)
                    task.cancel()

    async def _attempt(self, server: Server, row: PromptRow) -> None:
        requests, position = self.requests, row.position
        me = asyncio.current_task()
        try:
            try:
                done = requests.turns_done.setdefault(position, [])
                while not is_complete(row, done):
                    sent_at = requests.sent_at[position] = time.monotonic()
                    answer = await self.client.complete(server.base_url, messages_for(row, done), row.tools)
                    done.append(TurnResult(answer, server.name, time.monotonic() - sent_at))
            except (asyncio.CancelledError, RequestFailed):
                # the watchdog's cancel can surface as a client error (a drip-fed body): either way
                # it was the timeout, and the mark must not outlive this attempt
                timed_out = position in requests.overdue
                requests.overdue.discard(position)
                if server.in_flight.get(position) is not me:
                    # taken out meanwhile: the take-out requeued the row, and it may be out again
                    raise asyncio.CancelledError from None
                if not timed_out:
                    raise
                raise RequestFailed(
                    FailureKind.TIMEOUT, f"request timed out after {self.policy.request_timeout_s:g} s"
                ) from None
        except RequestFailed as failure:
            del server.in_flight[position]
            self._on_failure(server, row, failure)
        except asyncio.CancelledError:
            if server.in_flight.get(position) is me:
                raise  # the job is ending
        else:
            requests.overdue.discard(position)
            if server.in_flight.get(position) is not me:
                return  # taken out as it answered: the row was requeued and is sent again
            del server.in_flight[position]
            self.pool.record_success(server)
            self._on_answer(row, requests.turns_done.pop(position))
        finally:
            self._fill()

    def _on_answer(self, row: PromptRow, done: list[TurnResult]) -> None:
        output = build_row(
            row,
            done,
            model=self.model,
            thinking=self.sampling.thinking,
            keep_given_turns=self.policy.keep_given_turns,
        )
        meta = output["meta"]
        for result in done:
            if result.answer.usage_missing and not self.usage_missing_said:
                self.usage_missing_said = True
                self._say(
                    f"warning: server {result.server} answers without `usage`: those rows record 0 "
                    "prompt and completion tokens (the rates, `report` and --max-length read them); "
                    "SGLang and vLLM send it, so a proxy in between may drop it"
                )
            no_reasoning = self.reasoning.observe(result.answer.reasoning, result.answer.finish_reason)
            if no_reasoning is not None:
                self._stop(no_reasoning)
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
        del self.queue.rows[row.position]
        self.requests.forget(row.position)
        # One row, however many turns: the last turn's server, the time its requests took.
        latency_s = sum(result.latency_s for result in done)
        self.stats.answered(done[-1].server, latency_s, meta["prompt_tokens"], meta["completion_tokens"])
        self.stats.flagged_by.update(meta["flags"])
        if sum(len(w) for w in self.writers.values()) >= self.policy.flush_rows:
            self.flush()

    def _on_failure(self, server: Server, row: PromptRow, failure: RequestFailed) -> None:
        if self.pool.record_failure(server, failure.server_fault):
            # resets, timeouts or 5xx in a row although it accepts connections: the server
            # is failing; the rows in flight there go back for free, and so does this one if
            # the server did not answer at all, but an answer (a 5xx, a body that never
            # ended) was this row's attempt: else a row that fails every server never ends
            self._take_out(
                server,
                f"{server.failure_streak} failures in a row, the last: {failure}",
                overloaded=failure.status in OVERLOAD_STATUSES,
            )
            if failure.kind is FailureKind.CONNECTION:
                self._requeue(row.position)
            else:
                self._retry_or_fail(row.position, failure)
            return
        if failure.kind in (FailureKind.CONNECTION, FailureKind.TIMEOUT):
            # Is it the row or the server? A probe decides: a dead server's rows go
            # back to the queue for free; on a live server it was this row's attempt.
            self.probes.parked.setdefault(server.name, []).append((row.position, failure))
            self._probe_soon(server)
            return
        self._retry_or_fail(row.position, failure)

    def _retry_or_fail(self, position: int, failure: RequestFailed) -> None:
        retry = self.policy.retry
        overloads = self.requests.overloads.get(position, 0)
        if failure.status in OVERLOAD_STATUSES and overloads < OVERLOAD_RETRIES_PER_ROW:
            # "slow down", not "this row is bad": back off (at least Retry-After), no attempt spent
            self.requests.overloads[position] = overloads + 1
            self.batch.retried.append((str(failure), position))  # a request made, though no attempt spent
            self.batch.waiting.add(position)
            self.stats.retried(str(failure))
            due_s = retry.delay_s(min(overloads + 1, 8), failure.retry_after_s)
            self.queue.retry_at(time.monotonic() + due_s, position)
            return
        attempts = self.requests.attempts[position] = self.requests.attempts.get(position, 0) + 1
        if failure.kind is FailureKind.FATAL or attempts >= retry.max_attempts:
            self.batch.failed.append((str(failure), position))
            del self.queue.rows[position]
            self.requests.forget(position)
            self.stats.row_failed(str(failure))
            if self.stats.done == 0 and self.stats.failed >= FAILURES_BEFORE_SUCCESS_LIMIT:
                # A wrong --model or a broken server fails every row the same way; stop
                # before the whole input is marked failed.
                self._stop(
                    f"the first {self.stats.failed} rows all failed (last: "
                    f"{failure}); fix the cause, then rerun with --retry-failed"
                )
            return
        self.batch.retried.append((str(failure), position))
        self.batch.waiting.add(position)
        self.stats.retried(str(failure))
        self.queue.retry_at(time.monotonic() + retry.delay_s(attempts, failure.retry_after_s), position)

    def _requeue(self, position: int) -> None:
        self.batch.waiting.add(position)
        self.stats.requeued_from_down_server()
        self.queue.ready.appendleft(position)

    def _take_out(self, server: Server, reason: str, *, overloaded: bool = False) -> None:
        for position in self.pool.take_out(server, overloaded=overloaded):
            self._requeue(position)
        if server.out_for_good:
            why = (
                f"server {server.name} is out for good: taken out {server.idle_rejoins + 1} times in a row, "
                f"each time after rejoining without finishing a request (the last: {reason})"
            )
            self.out_for_good.append(why)
            self._say(why)
            return
        self._say(f"server {server.name} taken out ({reason}); its rows go back to the queue")
        self._probe_until_back(server)

    def _probe_soon(self, server: Server) -> None:
        probes = self.probes
        if server.name in probes.probing:
            return

        async def check() -> None:
            try:
                alive = await probe(self.session, server, self.policy.probe_timeout_s)
            finally:
                probes.probing.discard(server.name)
            parked = probes.parked.pop(server.name, [])
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

        if self.tasks.spawn(check(), f"the probe of server {server.name}") is not None:
            probes.probing.add(server.name)

    def _probe_until_back(self, server: Server) -> None:
        # taken out again soon after coming back (it answers probes, fails requests): wait longer
        delay_s, server.probe_delay_s = (
            server.probe_delay_s,
            min(server.probe_delay_s * 2, self.policy.probe_cap_s),
        )

        async def loop() -> None:
            nonlocal delay_s
            if server.router:  # a router is one cheap process: rejoin as soon as it answers
                delay_s = ROUTER_PROBE_INTERVAL_S
            await asyncio.sleep(delay_s)
            while not await probe(self.session, server, self.policy.probe_timeout_s):
                await asyncio.sleep(delay_s)
                if not server.router:  # a router is one cheap process: rejoin as soon as it answers
                    delay_s = min(delay_s * 2, self.policy.probe_cap_s)
            self.pool.bring_back(server)
            self._say(f"server {server.name} answers again; back in rotation")

        self.tasks.spawn(loop(), f"the prober of taken-out server {server.name}")

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
        self.ledger.apply(batch)

    def _watch_clock(self) -> None:
        jump_s = time.time() - time.monotonic() - self._clock_offset_s
        if abs(jump_s) > CLOCK_JUMP_S and abs(jump_s) > abs(self.clock_jump_s):
            self.clock_jump_s = jump_s
            self.ledger.set_meta({CLOCK_JUMP_KEY: f"{jump_s:.0f}"})  # `report` warns later too
            self._say(
                f"the system clock jumped by {jump_s:+.0f} s: time totals from the ledger are off by as much"
            )

    async def _flush_loop(self) -> None:
        """Commit answers about as they arrive, as often as the disk allows: the next flush
        waits FLUSH_COST_FACTOR times what the last one took (within FLUSH_MIN_WAIT_S and
        --flush-interval-s), so a killed driver loses little more than its requests in flight."""
        wait_s = interval_s = self.policy.flush_interval_s
        ticked = time.monotonic()
        while True:
            await asyncio.sleep(wait_s)
            self._watch_clock()
            started = time.monotonic()
            self.flush()
            now = time.monotonic()
            wait_s = min(interval_s, max(FLUSH_MIN_WAIT_S, FLUSH_COST_FACTOR * (now - started)))
            if self.view is not None and now - ticked >= interval_s:
                ticked = now
                self.view.tick()

    async def _metrics_loop(self) -> None:
        while True:
            await self._scrape_metrics()
            await asyncio.sleep(self.policy.metrics_interval_s)

    async def _scrape_metrics(self) -> None:
        for server in self.pool.servers:
            if server.router:
                # members come and go (fleet-repair): the room follows the router's list
                ready = await router_workers_ready(self.session, server, self.policy.probe_timeout_s)
                if ready:
                    server.slots = ready
            if server.healthy:
                values = await scrape_metrics(self.session, server, self.policy.probe_timeout_s)
                if values is not None:
                    self.spec.observe(server.name, values)
        accept = self.accept_length()
        if accept is not None:
            self.ledger.set_meta({"spec_accept_length": f"{accept:.4f}"})
