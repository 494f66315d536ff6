"""Watching one start: the log, the pid, the endpoint and the live argv/env, as events.

The decision is a pure reducer, `step(state, event, now)`: a `WatchState` and one
`Event` (a classified log line, the process's exit, a health answer, a proof of the
live argv/env, a watcher's error, or time passing) give the next state or an
`Outcome`: ready (log says so, endpoint answers 200, process proven), or a classified
failure within `grace_s` of the fatal line, the process's exit once its last lines
are in, a hang, a timeout, a mismatch. No host, clock or asyncio inside it, so every
ordering of events is testable with explicit times.

`RunWatch` is the shell: four watchers feed one queue; it classifies the lines,
feeds the events to `step`, and acts on what comes back (stops the group soon after
a fatal line, proves the process once more before ready, renders the outcome).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from specpilot.hosts.base import Host
from specpilot.launch import rundir
from specpilot.launch.allocations import plan_diff
from specpilot.launch.classify import Failure, LogClassifier
from specpilot.launch.command import PlannedLaunch
from specpilot.launch.health import HealthAnswer, probe
from specpilot.launch.outcome import Progress, UpOptions, UpResult
from specpilot.launch.stop import stop_group
from specpilot.launch.verify import Mismatch, check_live, wait_for_argv
from specpilot.secrets import redact, secret_values
from specpilot.spec import Spec

# -- events: what the shell saw ------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """A log line was classified: what the log has said so far, this line included."""

    ready_seen: bool = False
    fatal_seen: bool = False

    @classmethod
    def after(cls, classifier: LogClassifier) -> Line:
        return cls(ready_seen=classifier.ready_seen, fatal_seen=classifier.fatal_seen)


@dataclass(frozen=True)
class Exit:
    """The engine process is gone."""


@dataclass(frozen=True)
class Health:
    answer: HealthAnswer


@dataclass(frozen=True)
class Verified:
    """The live process compared with the plan: None when it matches (or has exited)."""

    mismatch: Mismatch | None


@dataclass(frozen=True)
class WatcherError:
    """A watcher failed (the host went away): nothing more will come from it."""

    error: Exception


@dataclass(frozen=True)
class Tick:
    """Time passed without an event (a deadline of `WatchState.due_s` came)."""


Event: TypeAlias = Line | Exit | Health | Verified | WatcherError | Tick

# -- outcomes: what the start came to -------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The log said ready, the endpoint answered 200, the process was proven just now."""


@dataclass(frozen=True)
class Failed:
    """A fatal line, and its error block has ended (grace or quiet period over)."""


@dataclass(frozen=True)
class Exited:
    """The process exited and its log's last lines are in (quiet or grace period over)."""


@dataclass(frozen=True)
class Mismatched:
    mismatch: Mismatch


@dataclass(frozen=True)
class Hung:
    quiet_s: float  # how long the log had been silent


@dataclass(frozen=True)
class TimedOut:
    elapsed_s: float


@dataclass(frozen=True)
class Broken:
    """A watcher failed while the process ran: the start cannot be judged."""

    error: Exception


Outcome: TypeAlias = Ready | Failed | Exited | Mismatched | Hung | TimedOut | Broken

# -- the reducer ---------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """The periods the decision waits for (seconds)."""

    grace_s: float  # after a fatal line (or the exit): collect the rest at most this long
    quiet_s: float  # ... or until the log has been quiet this long (the block ended)
    hang_timeout_s: float  # before ready: no log line this long is a hang
    ready_timeout_s: float  # since the launch began: not ready by then is a timeout

    @classmethod
    def of(cls, options: UpOptions, spec: Spec) -> Timing:
        server = spec.server
        return cls(options.grace_s, options.quiet_s, server.hang_timeout_s, server.ready_timeout_s)


@dataclass(frozen=True)
class WatchState:
    """What the decision knows; times are monotonic seconds."""

    timing: Timing
    started_s: float  # the launch began (the ready timeout counts from here)
    last_line_s: float  # the last log line arrived (or the watch began)
    ready_logged: bool = False
    fatal_s: float | None = None  # the first fatal line arrived while the process ran
    exited_s: float | None = None
    verified: bool = False  # the live process matched the plan at least once
    healthy: bool = False  # the endpoint's latest answer was 200

    @property
    def needs_proof(self) -> bool:
        """Log, endpoint and an earlier proof say ready: the process must be proven once
        more, at the moment it is declared ready (a `Verified` event)."""
        running = self.fatal_s is None and self.exited_s is None
        return running and self.ready_logged and self.healthy and self.verified

    @property
    def block_ends_s(self) -> float | None:
        """After a fatal line or the exit: when the rest of the log is in (the grace's end,
        or `quiet_s` after the latest line, whichever is first); None before either."""
        t = self.timing
        if self.exited_s is not None:
            return min(self.exited_s + t.grace_s, max(self.exited_s, self.last_line_s) + t.quiet_s)
        if self.fatal_s is not None:
            return min(self.fatal_s + t.grace_s, self.last_line_s + t.quiet_s)
        return None

    @property
    def hang_at_s(self) -> float | None:
        """When a silent log is a hang: before ready, while the process runs."""
        if self.ready_logged or self.exited_s is not None:
            return None
        return self.last_line_s + self.timing.hang_timeout_s

    @property
    def timeout_at_s(self) -> float | None:
        """When not being ready is a timeout: while the process runs."""
        return None if self.exited_s is not None else self.started_s + self.timing.ready_timeout_s

    @property
    def due_s(self) -> float:
        """When a `Tick` may decide something if no event comes first."""
        deadlines = (self.block_ends_s, self.hang_at_s, self.timeout_at_s)
        return min(d for d in deadlines if d is not None)


def step(state: WatchState, event: Event, now: float) -> WatchState | Outcome:
    """The state after `event` arrived at `now`, or how the start ended."""
    taken = _take(state, event, now)
    if not isinstance(taken, WatchState):
        return taken
    return _when(taken, now)


def _take(state: WatchState, event: Event, now: float) -> WatchState | Outcome:
    """What the event itself says."""
    if state.exited_s is not None:
        # the process is gone: only its last lines still matter (the log says why)
        return dataclasses.replace(state, last_line_s=now) if isinstance(event, Line) else state
    match event:
        case Line(ready_seen=ready, fatal_seen=fatal):
            fatal_s = now if fatal and state.fatal_s is None else state.fatal_s
            return dataclasses.replace(state, last_line_s=now, ready_logged=ready, fatal_s=fatal_s)
        case Exit():
            return dataclasses.replace(state, exited_s=now)
        case Health(answer=answer):
            return dataclasses.replace(state, healthy=answer.ok)
        case Verified(mismatch=mismatch):
            return _proven(state, mismatch)
        case WatcherError(error=error):
            return Broken(error)
        case Tick():
            return state


def _proven(state: WatchState, mismatch: Mismatch | None) -> WatchState | Outcome:
    """The live process was compared with the plan."""
    if state.fatal_s is not None:
        return state  # failure wins: the group is being stopped, the log says why
    if mismatch is not None:
        return Mismatched(mismatch)
    return Ready() if state.needs_proof else dataclasses.replace(state, verified=True)


def _when(state: WatchState, now: float) -> WatchState | Outcome:
    """What time says: the periods and timeouts that ended by `now`."""
    ends_s = state.block_ends_s
    if ends_s is not None and now >= ends_s:
        return Failed() if state.exited_s is None else Exited()
    if state.needs_proof:
        return state  # the shell proves the process now; ready or a mismatch follows
    if state.hang_at_s is not None and now >= state.hang_at_s:
        return Hung(now - state.last_line_s)
    if state.timeout_at_s is not None and now >= state.timeout_at_s:
        return TimedOut(now - state.started_s)
    return state


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
        plan_json: Mapping[str, Any] | None,
        options: UpOptions,
        progress: Progress | None,
        started: float,
    ) -> None:
        self.host, self.spec, self.planned = host, spec, planned
        self.remote_dir, self.plan_json, self.options = remote_dir, plan_json, options
        self.progress, self.started = progress, started
        self.classifier = LogClassifier(spec.engine.name)
        self.secrets = secret_values(planned.env, planned.argv)
        self.events: asyncio.Queue[Event | _Logged] = asyncio.Queue()
        self.pid: int | None = None
        self.launcher = ("bash", f"{remote_dir}/{rundir.LAUNCH_FILE}")
        self.log_path = f"{remote_dir}/{rundir.LOG_FILE}"
        self.exit_path = f"{remote_dir}/{rundir.EXIT_FILE}"
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
        return redact(text, self.secrets)

    def result(self, phase: str, cause: str, **kw: Any) -> UpResult:
        allocations = dict(self.classifier.allocations)
        return UpResult(
            name=self.spec.name,
            phase=phase,
            cause=cause,
            pid=self.pid,
            endpoint=self.planned.endpoint,
            allocations=allocations,
            plan_diff=plan_diff(allocations, self.plan_json),
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
            self.stop_task = asyncio.create_task(
                stop_group(
                    self.host,
                    pid,
                    term_timeout_s=self.options.term_timeout_s,
                    delay_s=self.options.quiet_s,
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
        self._follow_task = asyncio.create_task(self._reporting(self._follow_log))

    async def stop_following(self) -> None:
        if self._follow_task is not None:
            self._follow_task.cancel()
            await asyncio.gather(self._follow_task, return_exceptions=True)

    async def watch(self, pid: int) -> UpResult:
        """Classify until ready or failed. The caller stops the group on failure."""
        tasks = [
            asyncio.create_task(self._reporting(functools.partial(self._watch_pid, pid))),
            asyncio.create_task(self._reporting(self._poll_health)),
            asyncio.create_task(self._reporting(functools.partial(self._verify, pid))),
        ]
        try:
            return await self._decide(pid)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _decide(self, pid: int) -> UpResult:
        """Feed events to `step` until it returns an outcome; act on each state."""
        state = WatchState(Timing.of(self.options, self.spec), self.started, time.monotonic())
        returncode: asyncio.Task[int | None] | None = None
        try:
            while True:
                event = await self._next_event(state.due_s - time.monotonic())
                now = time.monotonic()
                if isinstance(event, Exit) and returncode is None:
                    # read while the last lines come: exit beats argv
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
