"""Watching one start: the log, the pid, the endpoint and the live argv/env, as events.

The decision is the pure reducer in readiness.py. `RunWatch` is the shell: four
watchers feed one queue; it classifies the lines, feeds the events to `step`, and
acts on what comes back (stops the group soon after
a fatal line, proves the process once more before ready, renders the outcome).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from specpilot.hosts.base import Host
from specpilot.launch import rundir
from specpilot.launch.allocations import plan_diff
from specpilot.launch.classify import Failure, LogClassifier
from specpilot.launch.command import PlannedLaunch
from specpilot.launch.health import probe
from specpilot.launch.outcome import Progress, UpOptions, UpResult
from specpilot.launch.readiness import (
    Broken,
    Event,
    Exit,
    Exited,
    Failed,
    Health,
    Hung,
    Line,
    Mismatched,
    Outcome,
    Ready,
    Tick,
    TimedOut,
    Timing,
    Verified,
    WatcherError,
    WatchState,
    step,
)
from specpilot.launch.stop import new_run_token, stop_group
from specpilot.launch.verify import Mismatch, check_live, wait_for_argv
from specpilot.plan.types import Plan
from specpilot.secrets import mask_log_text, secret_values
from specpilot.spec import Spec
from specpilot.taskgroup import beside

# -- the shell -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Logged:
    """A log line as followed, not yet classified (it is, when the decision takes it)."""

    text: str
    size_bytes: int  # with its newline


class RunWatch:
    """One start in progress; owns the tasks that read the log, the pid and the endpoint."""

    def __init__(
        self,
        host: Host,
        spec: Spec,
        planned: PlannedLaunch,
        remote_dir: str,
        plan: Plan | None,
        options: UpOptions,
        progress: Progress | None,
        started: float,
    ) -> None:
        self.host, self.spec, self.planned = host, spec, planned
        self.remote_dir, self.plan, self.options = remote_dir, plan, options
        self.progress, self.started = progress, started
        self.classifier = LogClassifier(planned.engine)
        # the spec's own too: a VLLM_API_KEY it sets gives way to its --api-key, moved there
        self.secrets = sorted(
            {*secret_values(planned.env, planned.argv), *secret_values(spec.engine.env, spec.engine.args)},
            key=len,
            reverse=True,
        )
        self.events: asyncio.Queue[Event | _Logged] = asyncio.Queue()
        self.pid: int | None = None
        # what proves a process is this run's when it is stopped (launch.stop)
        self.start_ticks: int | None = None
        self.token = new_run_token()
        self.launcher = ("bash", f"{remote_dir}/{rundir.LAUNCH_FILE}")
        self.log_path = f"{remote_dir}/{rundir.LOG_FILE}"
        self.exit_path = f"{remote_dir}/{rundir.EXIT_FILE_PREFIX}{self.token[:16]}"
        self.consumed_bytes = 0  # log bytes already queued as lines
        self.fed_bytes = 0  # log bytes classified: at ready, where serving begins
        self.stop_task: asyncio.Task[str] | None = None
        self._follow_task: asyncio.Task[None] | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _say(self) -> None:
        if self.progress is not None:
            line = self.classifier.last_meaningful_line
            self.progress(self.classifier.phase, self.elapsed(), None if line is None else self._hide(line))

    def _hide(self, text: str) -> str:
        return mask_log_text(text, self.secrets)

    def result(self, phase: str, cause: str, **kw: Any) -> UpResult:
        allocations = dict(self.classifier.allocations)
        return UpResult(
            name=self.spec.name,
            phase=phase,
            cause=cause,
            pid=self.pid,
            endpoint=self.planned.endpoint,
            allocations=allocations,
            plan_diff=plan_diff(allocations, self.plan),
            elapsed_s=self.elapsed(),
            last_phase=self.classifier.phase,
            remote_dir=self.remote_dir,
            **kw,
        )

    def failed(self, failure: Failure) -> UpResult:
        return self.result("failed", failure.cause, error=self._hide(failure.error), fix=failure.fix)

    def mismatched(self, mismatch: Mismatch) -> UpResult:
        error = f"the live process's {mismatch.what} differs from the plan:\n{mismatch.diff}"
        return self.result("failed", "mismatch", error=self._hide(error))

    async def _follow_log(self) -> None:
        partial = b""
        async for chunk in self.host.follow(self.log_path, 0):
            partial += chunk
            *lines, partial = partial.split(b"\n")
            for raw in lines:
                self.consumed_bytes += len(raw) + 1
                await self.events.put(_Logged(raw.decode(errors="replace").rstrip("\r"), len(raw) + 1))

    def _feed(self, line: str) -> None:
        if self.classifier.feed(line).kind is not None:
            self._say()

    def _classify(self, logged: _Logged) -> Line:
        self._feed(logged.text)
        self.fed_bytes += logged.size_bytes
        return Line.after(self.classifier)

    async def _next_event(self, wait_s: float) -> Event:
        """The next event, a classified line for a log line; a `Tick` after `wait_s`."""
        try:
            async with asyncio.timeout(max(0.0, wait_s)):
                item = await self.events.get()
        except TimeoutError:
            self._say()  # a quiet phase (imports, weight loading) still shows its elapsed time
            return Tick()
        return self._classify(item) if isinstance(item, _Logged) else item

    async def _finish_log(self) -> None:
        """The process exited and its last lines came (or the grace ran out): classify
        every byte not yet classified, in order, those still queued first."""
        await self.stop_following()
        while not self.events.empty():
            item = self.events.get_nowait()
            if isinstance(item, _Logged):
                self._classify(item)
        rest = await self.host.read_bytes(self.log_path, self.consumed_bytes)
        for raw in rest.decode(errors="replace").splitlines():
            self._feed(raw.rstrip("\r"))

    async def _returncode(self, until: float) -> int | None:
        """How the engine ended, as its watcher recorded it; None when no record came by
        `until` (its watcher is gone, so a zombie engine's status is unknowable)."""
        while True:
            returncode = await self.host.exit_status(self.exit_path)
            if returncode is not None or time.monotonic() >= until:
                return returncode
            await asyncio.sleep(0.02)

    def _stop_soon(self, pid: int) -> None:
        """A fatal line arrived: start stopping the group now, signalling after `quiet_s`,
        so the stop's round trip overlaps the collection of the error's last lines."""
        if self.stop_task is None:
            # by hand (tests/core/test_one_event_loop.py says why): the supervisor awaits it
            self.stop_task = asyncio.create_task(
                stop_group(
                    self.host,
                    pid,
                    term_timeout_s=self.options.term_timeout_s,
                    delay_s=self.options.quiet_s,
                    start_ticks=self.start_ticks,
                    token=self.token,
                )
            )

    async def _watch_pid(self, pid: int) -> None:
        while await self.host.pid_alive(pid):
            await asyncio.sleep(0.05)
        await self.events.put(Exit())

    async def _poll_health(self) -> None:
        while True:
            answer = await probe(self.host, self.planned.endpoint)
            await self.events.put(Health(answer))
            fast = self.classifier.ready_seen
            await asyncio.sleep(self.options.health_fast_every_s if fast else self.options.health_every_s)

    async def _verify(self, pid: int) -> None:
        """Prove the live process is the planned one; then keep proving it while starting."""
        argv, env = self.planned.argv, self.planned.env
        live = await wait_for_argv(
            self.host, pid, argv, self.launcher, timeout_s=self.options.verify_timeout_s
        )
        if live is None:
            return  # gone before it could be checked: the log and the exit tell why
        while True:
            mismatch = await check_live(self.host, pid, argv, env)
            await self.events.put(Verified(mismatch))
            if mismatch is not None:
                return
            await asyncio.sleep(self.options.reverify_every_s)

    async def _reporting(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run a watcher; if it fails (the host went away), hand the error to the decider
        instead of letting the start wait for a signal that will never come. Takes the
        function, not its coroutine: a task cancelled before it starts leaves none unawaited."""
        try:
            await work()
        except Exception as err:
            await self.events.put(WatcherError(err))

    def start_following(self) -> None:
        """Follow the log before the process exists, so its first line is not late."""
        # by hand (tests/core/test_one_event_loop.py says why): stopped early by `_finish_log`
        self._follow_task = asyncio.create_task(self._reporting(self._follow_log))

    async def stop_following(self) -> None:
        if self._follow_task is not None:
            self._follow_task.cancel()
            await asyncio.gather(self._follow_task, return_exceptions=True)

    async def watch(self, pid: int) -> UpResult:
        """Classify until ready or failed. The caller stops the group on failure."""
        watchers = (
            (functools.partial(self._watch_pid, pid), "watching the engine's pid"),
            (self._poll_health, "polling the engine's health"),
            (functools.partial(self._verify, pid), "verifying the engine's argv"),
        )
        async with contextlib.AsyncExitStack() as beside_it:
            for work, what in watchers:
                await beside_it.enter_async_context(beside(functools.partial(self._reporting, work), what))
            return await self._decide(pid)

    async def _decide(self, pid: int) -> UpResult:
        """Feed events to `step` until it returns an outcome; act on each state."""
        state = WatchState(Timing.of(self.options, self.spec), self.started, time.monotonic())
        returncode: asyncio.Task[int | None] | None = None
        try:
            while True:
                event = await self._next_event(state.due_s - time.monotonic())
                now = time.monotonic()
                if isinstance(event, Exit) and returncode is None:
                    # read while the last lines come: exit beats argv (a task by hand:
                    # awaited by `_render`, else cancelled in the finally below)
                    returncode = asyncio.create_task(self._returncode(now + self.options.grace_s))
                after = step(state, event, now)
                if isinstance(after, WatchState) and after.needs_proof:
                    mismatch = await check_live(self.host, pid, self.planned.argv, self.planned.env)
                    after = step(after, Verified(mismatch), time.monotonic())
                if not isinstance(after, WatchState):
                    return await self._render(after, returncode)
                state = after
                if state.fatal_s is not None:
                    self._stop_soon(pid)
        finally:
            if returncode is not None and not returncode.done():
                returncode.cancel()
                await asyncio.gather(returncode, return_exceptions=True)

    async def _render(self, outcome: Outcome, returncode: asyncio.Task[int | None] | None) -> UpResult:
        match outcome:
            case Ready():
                return self.result("ready", "ready")
            case Mismatched(mismatch=mismatch):
                return self.mismatched(mismatch)
            case Failed():
                return self.failed(self.classifier.failure(exited=False))
            case Exited():
                assert returncode is not None  # started with the exit
                exit_status, _ = await asyncio.gather(returncode, self._finish_log())
                result = self.failed(self.classifier.failure(exited=True, exit_code=exit_status))
                result.exit_status = exit_status
                return result
            case Hung(quiet_s=quiet_s):
                return self.result("failed", "hang", error=self._hang_error(quiet_s))
            case TimedOut(elapsed_s=elapsed_s):
                return self.result(
                    "failed",
                    "timeout",
                    error=f"not ready after {elapsed_s:.0f} s "
                    f"(phase '{self.classifier.phase}'; raise [server] ready_timeout_s "
                    "if this engine needs longer)",
                )
            case Broken(error=error):
                raise error

    def _hang_error(self, quiet_s: float) -> str:
        return self._hide(
            f"no new log line for {quiet_s:.0f} s during phase '{self.classifier.phase}'; "
            f"last line: {self.classifier.last_meaningful_line or '(none)'}"
        )
