"""What to start after a run failed: one policy for `up --replan`, the job's healer and `fleet-repair`.

A failure, as `launch/classify.py` tells it from the engine's signatures, maps to the next start:

- out of memory at start (or ready with allocations off the plan): the plan's next step, planned
  again from the numbers the engine printed (`launch/replan.py`);
- out of memory while serving: the same spec with the engine's bound for what killed it
  (`Engine.serving_bounds`, `engines/bounds.py`);
- anything else (a crash, a stall, a start that failed otherwise, a re-plan that cannot be
  made): the same spec, after a backoff that doubles with each restart.

A caller says what it may spend and has spent in a `Budget`; past it the answer is to give up,
with why. A job reads its restarts back from job.json (`restarts_made`), one server's and a
fleet's members' alike, so a resumed job keeps its count.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specpilot.engines.bounds import Bound, Bounded, bound_args
from specpilot.errors import UserError
from specpilot.hosts.base import Host
from specpilot.launch.ops import host_for
from specpilot.launch.replan import Replan, replan
from specpilot.launch.server_plan import ServerPlan
from specpilot.launch.serving import Crash, serving_classifier
from specpilot.launch.state import RunState, read_state, state_path
from specpilot.spec import Spec

#: a ready start whose allocations are more than 5% from its plan: re-planned like an OOM
OFF_PLAN = "off_plan"
#: the failure's cause that a bound or a re-plan answers
OOM = "oom"
#: why the answer is to give up: re-plans allowed none, the allowed ones are used, the log
#: cannot calibrate, the planner recommends what ran, or the restarts allowed are used
GiveUpWhy = Literal["off", "limit", "cannot_calibrate", "same_flags", "max_restarts"]
Action = Literal["replan", "bound", "restart", "give_up"]
LogReader = Callable[[], Awaitable[str]]


def known_log(text: str) -> LogReader:
    """A log the caller has already read."""

    async def read() -> str:
        return text

    return read


async def _no_log() -> str:
    return ""


@dataclass(frozen=True)
class Failure:
    """How a run failed, as the engine's signatures classify it."""

    at: Literal["start", "serving"]
    #: a cause of `engines.signatures.CAUSES`, `OFF_PLAN`, or "stall" (no token progress)
    cause: str
    #: in words: the error's first line, or why a ready start calls for a re-plan
    line: str
    #: the engine's log (the whole start's, or since ready), read only when the answer needs it
    log: LogReader = _no_log
    #: the engine's bounds for a death of memory while serving
    bounds: tuple[Bound, ...] = ()


@dataclass(frozen=True)
class Budget:
    """What a caller may spend on one run, and has spent."""

    max_restarts: int = 0
    restarts: int = 0
    max_replans: int = 0
    replans: int = 0
    #: seconds before the first restart; doubled for each one after
    backoff_s: float = 1.0


@dataclass(frozen=True)
class Recovery:
    """The next start: the server it starts and what changed, the wait before it, or why
    there is none (then `server` is the one that failed)."""

    action: Action
    server: ServerPlan
    backoff_s: float = 0.0
    replan: Replan | None = None
    bound: Bounded | None = None
    gave_up: GiveUpWhy | None = None
    #: the re-plan's refusal (`cannot_calibrate`)
    error: str | None = None

    @property
    def spec(self) -> Spec:
        """The spec as given to the next start (to the one that failed, when there is none)."""
        return self.server.spec

    @property
    def change(self) -> dict[str, Any] | None:
        if self.replan is not None:
            return self.replan.to_json()
        return self.bound.to_json() if self.bound is not None else None

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "change": self.change, "backoff_s": self.backoff_s,
                "gave_up": self.gave_up, "error": self.error}  # fmt: skip


def _with_args(spec: Spec, args: Sequence[str]) -> Spec:
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": list(args)})})


async def _replanned(server: ServerPlan, failure: Failure, budget: Budget) -> Recovery:
    if budget.replans >= budget.max_replans:
        return Recovery("give_up", server, gave_up="limit" if budget.max_replans else "off")
    try:
        change = replan(server.resolved, await failure.log(), server.plan)
    except UserError as err:
        return Recovery("give_up", server, gave_up="cannot_calibrate", error=str(err))
    if change is None:
        return Recovery("give_up", server, gave_up="same_flags")
    return Recovery("replan", server.respec(change.spec), replan=change)


async def next_start(server: ServerPlan, failure: Failure, budget: Budget) -> Recovery:
    """What to start after `failure` of `server`: a changed spec is checked and planned again
    from the server's own resolution (`ServerPlan.respec`: the model is not read again)."""
    refused: Recovery | None = None
    if failure.at == "start" and failure.cause in (OOM, OFF_PLAN):
        refused = await _replanned(server, failure, budget)
        if refused.action == "replan" or failure.cause == OFF_PLAN:  # a ready server is kept as it is
            return refused
    if budget.restarts >= budget.max_restarts:
        return refused or Recovery("give_up", server, gave_up="max_restarts")
    backoff_s = budget.backoff_s * 2**budget.restarts
    if failure.at == "serving" and failure.cause == OOM:
        spec = server.spec
        bounded = bound_args(failure.bounds, list(spec.engine.args), await failure.log())
        if bounded is not None:
            return Recovery("bound", server.respec(_with_args(spec, bounded.args)), backoff_s, bound=bounded)
    return Recovery("restart", server, backoff_s)


def serving_death(crash: Crash, state: RunState, serving_log: str) -> tuple[Crash, Failure]:
    """A ready run's death as the whole log since ready tells it (a process found gone before
    its last lines were read has a verdict without its fatal line: cause "crash", not "oom"),
    and the failure the policy reads."""
    classifier = serving_classifier(state)
    for line in serving_log.splitlines():
        classifier.feed(line.rstrip("\r"))
    if classifier.fatal_seen:
        told = classifier.failure(exited=True, exit_code=crash.exit_status)
        crash = Crash(told.cause, told.signature, told.error, crash.exit_status)
    failure = Failure(
        "serving", crash.cause, crash.first_line, known_log(serving_log), classifier.engine.serving_bounds
    )
    return crash, failure


async def read_serving_log(host: Host, state: RunState) -> str:
    """The run's log since ready."""
    data = await host.read_bytes(state.log_path, state.ready_log_bytes or 0)
    return data.decode(errors="replace")


async def run_failure(name: str) -> Failure:
    """How run `name`, found not serving, ended, as its record and its log tell: at start when
    it never got ready, else while serving (the crash its record keeps, told again from the
    whole log since ready)."""
    if not state_path(name).exists():
        return Failure("start", "unknown", "it has no run")
    state = read_state(name)
    if state.ready_log_bytes is None:
        return Failure("start", state.cause or "unknown", f"its start {state.phase}")
    serving_log = ""
    host = host_for(state)
    try:
        with contextlib.suppress(FileNotFoundError):  # a deleted log: the record alone tells it
            serving_log = await read_serving_log(host, state)
    finally:
        await host.close()
    kept = state.crash
    crash = (
        Crash(kept.cause, kept.signature, kept.line, kept.exit_status)
        if kept is not None
        else Crash("crash", None, "the engine process is gone", None)
    )
    return serving_death(crash, state, serving_log)[1]


def restarts_made(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per run, the restarts a job's record says were made: each entry names the count so far
    (`restarts`); one without it (an older record's) counts one."""
    made: dict[str, int] = {}
    for entry in entries:
        run, count = str(entry.get("run")), entry.get("restarts")
        made[run] = count if isinstance(count, int) else made.get(run, 0) + 1
    return made
