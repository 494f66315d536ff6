"""Starting, reusing, restarting and stopping the one server a job drives (`[job] server`).

Every start goes through `launch` (the same verified path as `up`): the argv and env are
proven on the live process. A rerun of the job reuses the run it recorded when that very
process (pid and start time, as the run state proves them) is still serving; anything else
under the run's name is stopped first, so a GPU never holds two servers of one job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specpilot.errors import UserError
from specpilot.hosts import open_host_section
from specpilot.launch.ops import clear_leftovers, run_down, run_status
from specpilot.launch.outcome import UpResult
from specpilot.launch.server_plan import ServerPlan
from specpilot.launch.shield import signals_blocked, stop_started, wait_for_children
from specpilot.launch.state import read_state, state_path
from specpilot.launch.up import (
    NoReplan,
    OnEvent,
    Replanned,
    SettleOptions,
    Starting,
    UpEvent,
    start_until_settled,
)
from specpilot.spec import Spec

Say = Callable[[str], None]
#: a ready server the job replaces gets this long between SIGTERM and SIGKILL
STOP_TIMEOUT_S = 30.0
#: re-planned starts after an out-of-memory start (the plan's next step down), per start
MAX_REPLANS = 2


@dataclass
class Started:
    """What `up` of the job started: the server (with what the job added) and its proof."""

    server: ServerPlan
    result: UpResult
    reused: bool = False
    replans: list[dict[str, Any]] | None = None

    @property
    def spec(self) -> Spec:
        return self.server.spec

    def evidence(self) -> dict[str, Any]:
        state = read_state(self.spec.name)
        return {
            "name": self.spec.name,
            "reused": self.reused,
            "pid": state.pid,
            "start_ticks": state.start_ticks,
            "endpoint": state.endpoint,
            "argv_verified": list(state.argv),
            "args": list(self.spec.engine.args),
            "elapsed_s": round(self.result.elapsed_s, 1),
            "replans": self.replans or [],
            "server_plan": self.server.to_json(),
        }


async def recorded_run_serving(name: str, recorded: dict[str, Any] | None) -> bool:
    """The run the job recorded is the one running now, and it answers."""
    if recorded is None or not state_path(name).exists():
        return False
    state = read_state(name)
    if state.pid != recorded.get("pid") or state.start_ticks != recorded.get("start_ticks"):
        return False
    status = await run_status(name, lines=0)
    return status.serving and not status.pid_reused


async def clear_run(
    name: str, recorded: dict[str, Any] | None, say: Say, *, ours_since: float | None = None
) -> None:
    """Before a start under `name`: stop what the job itself started earlier (the run it
    recorded, or one started since `ours_since`: a start its kill interrupted), end what a
    dead run left; a live run the job did not start is refused."""
    if not state_path(name).exists():
        return
    state = read_state(name)
    ours = (recorded is not None and recorded.get("pid") == state.pid) or (
        ours_since is not None and state.started_at_s >= ours_since
    )
    left = await clear_leftovers(name)
    if left is not None:
        return
    if not ours:
        raise UserError(
            f"run {name!r} is running (pid {state.pid} on {state.host.target}) and this job did not start it",
            field="[job] server",
            fix=f"stop it with `specpilot down {name}`, or give the job's server spec another name",
        )
    say(f"{name}: stopping the start an earlier run of this job left (pid {state.pid})")
    await run_down(name, timeout_s=STOP_TIMEOUT_S)


def job_started(name: str, up: dict[str, Any]) -> bool:
    """Whether the run recorded under `name` is one the job started: the one its `up` stage
    recorded, or one started since that stage began (a start a kill interrupted, a restart)."""
    if up.get("status", "pending") == "pending" or not state_path(name).exists():
        return False
    state = read_state(name)
    recorded = up.get("evidence") or {}
    return recorded.get("pid") == state.pid or state.started_at_s >= float(up.get("started_at", "inf"))


async def stop_own(name: str, up: dict[str, Any]) -> list[str]:
    """Stop run `name` if the job started it (`job_started`), with the ending signals held
    off: a ready server as `down` stops it, a start in the middle by its token (the engine's
    pid may not be recorded yet). A line for each thing left running."""
    if not job_started(name, up):
        return []
    if up.get("status") != "done":  # an earlier process of the job may have recorded it
        return await stop_started([name], only_minted_here=False)
    with signals_blocked():
        await wait_for_children()
        result = await run_down(name, timeout_s=STOP_TIMEOUT_S)
    return left_after_down(name, result)


def left_after_down(name: str, result: dict[str, Any]) -> list[str]:
    """A line for what `run_down` left: a process that survived SIGKILL, or one it did not
    signal because nothing proves it the run's (a record forged onto another's process)."""
    if result["stopped"] in ("survived", "unproven"):
        left = " ".join(map(str, result["survivors"] or result["unproven"]))
        return [f"{name}: pid {left} is left ({result['stopped']}; see `specpilot status {name}`)"]
    return []


def _say_event(name: str, say: Say) -> OnEvent:
    """The job's words for a start's steps: where it starts and what a re-plan changed."""

    def on_event(event: UpEvent) -> None:
        match event:
            case Starting(spec):
                say(f"{name}: starting on {spec.host.target}")
            case NoReplan(_, "cannot_calibrate", error):
                say(f"{name}: out of memory at start and no re-plan ({error})")
            case Replanned(number, _, _, change):
                for line in (*change.reasons, *change.changes):
                    say(f"{name}: re-plan {number}: {line}")

    return on_event


async def start(server: ServerPlan, say: Say) -> Started:
    """Start `server` (checked and planned by the job) through `up`'s loop; an out-of-memory
    start is planned again from the engine's own numbers (the plan's next step down) at most
    MAX_REPLANS times (a ready server is kept as it started)."""
    options = SettleOptions(max_replans=MAX_REPLANS, replan_off_plan=False, stop_timeout_s=STOP_TIMEOUT_S)
    run = await start_until_settled(server, options, _say_event(server.spec.name, say))
    return Started(run.server, run.result, replans=[r.to_json() for r in run.replans])


async def wait_port_closed(spec: Spec, timeout_s: float = 10.0) -> None:
    """A killed engine's socket is let go only once the kernel tore the process down."""
    from specpilot.fleet.repair import wait_until_closed

    host = open_host_section(spec.host)
    try:
        async with asyncio.timeout(timeout_s + 5.0):
            await wait_until_closed(host, [spec.server.port])
    finally:
        await host.close()
