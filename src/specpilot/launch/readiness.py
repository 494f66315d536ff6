"""Whether a start is ready or failed, as a pure reducer: `step(state, event, now)`.

A `WatchState` and one event (a classified log line, the process's exit, a health
answer, a proof of the live argv/env, a watcher's error, or time passing) give the next
state or an `Outcome`: ready (the log says so, the endpoint answers 200, the process is
proven), or a classified failure within `grace_s` of the fatal line, the process's exit
once its last lines are in, a hang, a timeout, a mismatch. No host, clock or asyncio
here, so every ordering of events is testable with explicit times; `watch.RunWatch`
is the shell that gathers the events and acts on the answers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeAlias

from specpilot.launch.classify import LogClassifier
from specpilot.launch.health import HealthAnswer
from specpilot.launch.outcome import UpOptions
from specpilot.launch.verify import Mismatch
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
