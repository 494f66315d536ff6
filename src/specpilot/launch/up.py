"""`up`'s loop: start a spec and, when the start proves the plan wrong, plan again and restart.

`specpilot up` and the job's server stage both start through `start_until_settled`: check and
plan (preflight), start under supervision (`launch`), and, where the options allow, re-plan
from the engine's printed numbers (`replan`) and start once more. Nothing here prints: each
step is handed to the caller's `on_event` as a typed event, and the caller says it in its own
words (the CLI on the terminal, the job in its log).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from specpilot.errors import JobFailed, UserError
from specpilot.hosts import open_host_section
from specpilot.launch.ops import clear_leftovers, run_down, stream_log
from specpilot.launch.outcome import UpResult
from specpilot.launch.preflight import Preflight
from specpilot.launch.recovery import OFF_PLAN, OOM, Budget, Failure, Recovery, next_start
from specpilot.launch.replan import Replan, replan_reason
from specpilot.launch.server_plan import ServerPlan, plan_server
from specpilot.launch.state import read_state, start_lock
from specpilot.launch.supervisor import launch
from specpilot.spec import Spec

#: at most this many re-planned restarts in one `up`: each costs a whole engine start
MAX_REPLANS = 3


@dataclass(frozen=True)
class SettleOptions:
    #: start even when check or plan refuses (the first start only: a re-plan must pass them)
    force: bool = False
    #: re-planned starts allowed after the first
    max_replans: int = 0
    #: re-plan a ready server whose allocations are more than 5% from the plan too (else only a
    #: start that ran out of memory)
    replan_off_plan: bool = True
    #: a ready server being replaced gets this long between SIGTERM and SIGKILL
    stop_timeout_s: float = 30.0


@dataclass(frozen=True)
class Preflighted:
    """Check and plan ran for the next start (warnings, flags `up` adds)."""

    pre: Preflight


@dataclass(frozen=True)
class Starting:
    """The engine is being shipped and started with this spec."""

    spec: Spec


@dataclass(frozen=True)
class Phase:
    """A start's progress: its phase, seconds since it began, the engine's last log line."""

    phase: str
    elapsed_s: float
    last: str | None


@dataclass(frozen=True)
class Settled:
    """One start ended: ready, failed or refused."""

    result: UpResult


#: why a start that called for a re-plan is not re-planned: the options allow none, the
#: allowed ones are used, the log cannot calibrate, or the planner recommends what ran
NoReplanWhy = Literal["off", "limit", "cannot_calibrate", "same_flags"]


@dataclass(frozen=True)
class NoReplan:
    reason: str
    why: NoReplanWhy
    #: the calibration's refusal (`cannot_calibrate`)
    error: str | None = None


@dataclass(frozen=True)
class Replanned:
    """Re-plan `number` of `allowed` is started next, for `reason`."""

    number: int
    allowed: int
    reason: str
    change: Replan


@dataclass(frozen=True)
class Note:
    """A line to say as it is (what a dead earlier run of the name left and what became of it)."""

    line: str


UpEvent = Preflighted | Starting | Phase | Settled | NoReplan | Replanned | Note
OnEvent = Callable[[UpEvent], None]


@dataclass(frozen=True)
class UpRun:
    """The last start's result, the re-plans made before it, and the server it started."""

    result: UpResult
    replans: tuple[Replan, ...]
    server: ServerPlan

    @property
    def spec(self) -> Spec:
        """The spec as given to the last start (a re-plan's)."""
        return self.server.spec

    def to_json(self) -> dict[str, Any]:
        return {**self.result.to_json(), "replans": [r.to_json() for r in self.replans]}


def _refusal(spec: Spec, pre: Preflight) -> UpResult:
    """Nothing was started: phase `refused`, with the reason (config or oom) as the cause."""
    return UpResult(
        name=spec.name,
        phase="refused",
        cause=pre.cause or "config",
        error="refused before start (use --force to start anyway):\n" + "\n".join(pre.errors),
        fix=pre.fix,
    )


def port_taken(result: UpResult) -> bool:
    """The spec's port was found in use before anything started."""
    return result.cause == "port_in_use" and result.pid is None


def port_refusal(result: UpResult, port: int) -> UserError | None:
    """A port found in use before anything started is bad input: the spec's port to change."""
    if not port_taken(result):
        return None
    return UserError(
        result.error or f"port {port} is in use",
        field="[server] port",
        fix=result.fix.text if result.fix else "set another [server] port",
    )


async def run_up(spec: Spec, options: SettleOptions, on_event: OnEvent) -> UpRun:
    """`specpilot up`: refuse a start of the name under way and a live run of it, then start
    until settled."""
    with start_lock(spec.name):
        await refuse_if_running(spec.name, on_event)
        # the model read once and the release looked up once: a re-plan changes flags only
        return await start_until_settled(await plan_server(spec), options, on_event)


async def start_until_settled(server: ServerPlan, options: SettleOptions, on_event: OnEvent) -> UpRun:
    """Start, re-planned up to `options.max_replans` times: the last result and the re-plans made."""
    replans: list[Replan] = []
    while True:
        pre = server.preflight
        on_event(Preflighted(pre))
        if pre.errors and not (options.force and not replans):
            result = _refusal(server.spec, pre)
        else:
            result = await _start(server, on_event)
        on_event(Settled(result))
        recovery = await _next_replan(server, result, len(replans), options, on_event)
        if recovery is None or recovery.replan is None:
            return UpRun(result, tuple(replans), server)
        replans.append(recovery.replan)
        server = recovery.server


async def _start(server: ServerPlan, on_event: OnEvent) -> UpResult:
    on_event(Starting(server.started))

    def progress(phase: str, elapsed_s: float, last: str | None) -> None:
        on_event(Phase(phase, elapsed_s, last))

    host = open_host_section(server.started.host)
    try:
        return await launch(server, host, progress=progress)
    finally:
        await host.close()


def _reason(result: UpResult, options: SettleOptions) -> str | None:
    if result.phase == "ready" and not options.replan_off_plan:
        return None
    return replan_reason(result)


async def _next_replan(
    server: ServerPlan, result: UpResult, done: int, options: SettleOptions, on_event: OnEvent
) -> Recovery | None:
    """The re-planned server to start next (`recovery.next_start`); None to stop. A ready
    server that is re-planned is stopped first (by its process group)."""
    reason = _reason(result, options)
    if reason is None:
        return None
    name = server.spec.name
    cause = OOM if result.phase == "failed" else OFF_PLAN
    failure = Failure("start", cause, reason, lambda: _engine_log(name))
    budget = Budget(max_replans=options.max_replans, replans=done)
    recovery = await next_start(server, failure, budget)
    if recovery.replan is None:
        assert recovery.gave_up is not None and recovery.gave_up != "max_restarts"  # no restart allowed
        on_event(NoReplan(reason, recovery.gave_up, recovery.error))
        return None
    if result.phase == "ready":
        await run_down(name, timeout_s=options.stop_timeout_s)
    on_event(Replanned(done + 1, options.max_replans, reason, recovery.replan))
    return recovery


async def _engine_log(name: str) -> str:
    chunks = [chunk async for chunk in stream_log(name, follow=False)]
    return b"".join(chunks).decode(errors="replace")


async def refuse_if_running(name: str, on_event: OnEvent) -> None:
    """A live run of this name is refused; of a dead one, whatever is left of its
    process group is ended first (a helper that outlived a crash can hold a port or memory)."""
    try:
        state = read_state(name)
    except UserError:
        return
    left = await clear_leftovers(name)
    if left is None:
        raise UserError(
            f"run {name!r} is already running (pid {state.pid} on {state.host.target})",
            field="name",
            fix=f"stop it with `specpilot down {name}` or give the spec another name",
        )
    if left.signalled:
        ended = " ".join(str(pid) for pid in left.signalled if pid not in left.survivors)
        on_event(Note(f"{name}: ended what the earlier run left in process group {state.pgid}: pid {ended}"))
    if left.unproven:
        on_event(
            Note(
                f"{name}: pid {' '.join(map(str, left.unproven))} of the earlier run's process group "
                f"{state.pgid} cannot be proven the run's and were left alone"
            )
        )
    if left.survivors:
        raise JobFailed(
            f"{name}: pid {' '.join(map(str, left.survivors))} of the earlier run's process group "
            f"{state.pgid} survived SIGKILL (most likely stuck in the GPU driver); see "
            f"`ps -o pid,stat,cmd -g {state.pgid}` on {state.host.target} before starting again"
        )
