"""`status`, `logs` and `down` for a run, from its local state file (works from a new shell)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from specpilot.errors import JobFailed
from specpilot.hosts import open_host_section
from specpilot.hosts.base import Host
from specpilot.hosts.errors import HostTimeout
from specpilot.launch.health import probe
from specpilot.launch.identity import recorded_process
from specpilot.launch.serving import check_serving, fill_crash_exit, record_crash
from specpilot.launch.state import CrashRecord, RunState, read_state, write_state
from specpilot.launch.stop import GroupStop, RunProcesses, end_group, run_members
from specpilot.launch.tail import followed, next_chunk
from specpilot.secrets import mask_log_text

#: what is left of a dead run gets this long between SIGTERM and SIGKILL (vLLM's
#: resource_tracker ignores SIGTERM; nothing of a crashed run has work to save)
LEFTOVER_TERM_S = 2.0
#: how long `status` waits for the endpoint: a busy engine answers /health late, not never
STATUS_TIMEOUT_S = 10.0
#: how long `logs` waits for the host to hand over the log (or to say the process runs)
LOGS_TIMEOUT_S = 60.0


def host_for(state: RunState) -> Host:
    return open_host_section(state.host)


def proof_of(state: RunState, process: str) -> RunProcesses:
    """What proves a process is the run's (launch.stop), given `recorded_process`'s answer:
    once the engine's pid names another process, its group number is not the run's; while
    nothing proves the pid the run's ("unproven"), neither does its start time."""
    if process == "unproven":
        return RunProcesses(state.pgid, None, state.run_token)
    return RunProcesses(0 if process == "reused" else state.pgid, state.start_ticks, state.run_token)


async def _end_proven(host: Host, state: RunState, process: str, term_timeout_s: float) -> GroupStop:
    proof = proof_of(state, process)
    stopped = await end_group(
        host, proof.pgid, term_timeout_s=term_timeout_s, start_ticks=proof.start_ticks, token=proof.token
    )
    # a recycled pid and nothing found by the token: say why nothing was signalled
    return GroupStop("stale") if process == "reused" and not stopped.signalled else stopped


async def end_leftovers(host: Host, state: RunState, process: str | None = None) -> GroupStop:
    """End what is left of a run whose engine is gone: its processes that outlived it (in
    its group, or out of it with the run's token). `process` is `recorded_process`'s answer
    when the caller has it. Nothing is signalled while the engine runs ("not_running"); when
    its pid names another process now, only what holds the run's token is ("stale" if none)."""
    process = process or await recorded_process(host, state)
    if process == "running":
        return GroupStop("not_running")
    return await _end_proven(host, state, process, LEFTOVER_TERM_S)


async def clear_leftovers(name: str) -> GroupStop | None:
    """`end_leftovers` for run `name` as recorded (before `up` reuses the name); None
    while its engine still runs."""
    state = read_state(name)
    host = host_for(state)
    try:
        process = await recorded_process(host, state)
        return None if process == "running" else await end_leftovers(host, state, process)
    finally:
        await host.close()


@dataclass
class RunStatus:
    name: str
    phase: str
    pid: int | None
    alive: bool
    uptime_s: float | None
    endpoint: str | None
    endpoint_status: int | None
    #: what the endpoint said, in words: "200", "503", "no answer", "slow to answer (N s)"
    endpoint_state: str | None
    served_model_name: str | None
    target: str
    last_lines: list[str] = field(default_factory=list)
    #: how the engine ended, when it has and its watcher recorded it (-N: signal N)
    exit_status: int | None = None
    #: the recorded pid now belongs to another process (the run's own is gone)
    pid_reused: bool = False
    cause: str | None = None
    #: how a ready run ended (a fatal line after ready, or its process gone)
    crash: CrashRecord | None = None
    #: with the engine gone: processes of the run that outlived it (`down` ends them), and
    #: members of its group that cannot be proven the run's (never signalled)
    leftovers: tuple[int, ...] = ()
    leftovers_unproven: tuple[int, ...] = ()

    @property
    def serving(self) -> bool:
        return self.alive and self.endpoint_status == 200 and self.crash is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "pid": self.pid,
            "alive": self.alive,
            "uptime_s": None if self.uptime_s is None else round(self.uptime_s, 1),
            "endpoint": self.endpoint,
            "endpoint_status": self.endpoint_status,
            "endpoint_state": self.endpoint_state,
            "served_model_name": self.served_model_name,
            "target": self.target,
            "last_lines": self.last_lines,
            "exit_status": self.exit_status,
            "pid_reused": self.pid_reused,
            "cause": self.cause,
            "crash": None if self.crash is None else self.crash.to_json(),
            "leftovers": list(self.leftovers),
            "leftovers_unproven": list(self.leftovers_unproven),
        }


async def run_status(name: str, *, lines: int = 10, timeout_s: float = STATUS_TIMEOUT_S) -> RunStatus:
    """The run as it is now; an endpoint that does not answer within `timeout_s` is
    "slow to answer", a state like any other. Read-only: nothing is signalled (what the
    engine left behind is named, for `down` to end)."""
    state = read_state(name)
    host = host_for(state)
    try:
        crash = await check_serving(host, state)
        if crash is not None:
            state = record_crash(name, crash)
        state = await fill_crash_exit(host, name)
        process = await recorded_process(host, state)
        alive = process == "running"
        # found dead (crashed, or ended outside specpilot): name what of it may still hold a port or memory
        leftovers, unproven = ((), ()) if alive else await run_members(host, proof_of(state, process))
        exit_path = state.exit_path
        exit_status = None if alive or not exit_path else await host.exit_status(exit_path)
        phase = state.phase
        if process == "unproven":
            phase = "unproven"  # the recorded pid is not provably the run's: not reported as it
        elif not alive and phase in ("starting", "ready"):
            phase = "exited"  # it was up and is gone: nobody stopped it through specpilot
        answer = await probe(host, state.endpoint, timeout_s=timeout_s) if alive and state.endpoint else None
        tail = await host.run(["tail", "-n", str(lines), state.log_path], check=False)
        return RunStatus(
            name=name,
            phase=phase,
            pid=state.pid,
            alive=alive,
            uptime_s=time.time() - state.started_at_s if alive else None,
            endpoint=state.endpoint,
            endpoint_status=None if answer is None or answer.slow_after_s is not None else answer.status,
            endpoint_state=None if answer is None else answer.state,
            served_model_name=state.served_model_name,
            target=state.host.target,
            # the engine may echo its args (an --api-key among them): shown masked, as `check` does
            last_lines=[mask_log_text(line) for line in tail.stdout.decode(errors="replace").splitlines()],
            exit_status=exit_status,
            pid_reused=process == "reused",
            cause=state.cause,
            crash=state.crash,
            leftovers=leftovers,
            leftovers_unproven=unproven,
        )
    finally:
        await host.close()


@contextlib.asynccontextmanager
async def _answer_within(timeout_s: float, host: Host, doing: str) -> AsyncIterator[None]:
    """A host that does not answer within `timeout_s` is one line saying so (HostTimeout)."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except TimeoutError:
        raise HostTimeout(
            f"{host.target} was slow to answer ({timeout_s:g} s) {doing}; "
            "try again, or raise --timeout-s if the host is busy"
        ) from None


async def stream_log(
    name: str, *, follow: bool, quiet_exit_s: float = 1.0, timeout_s: float = LOGS_TIMEOUT_S
) -> AsyncIterator[bytes]:
    """The whole log; with `follow`, then new bytes until the process is gone and the
    log has been quiet for `quiet_exit_s` (or the consumer stops). Reading the whole log,
    and each look at the process, must answer within `timeout_s`."""
    state = read_state(name)
    host = host_for(state)
    log_path = state.log_path
    try:
        async with _answer_within(timeout_s, host, f"reading {log_path}"):
            try:
                data = await host.read_bytes(log_path, 0, None if not follow else 0)
            except FileNotFoundError:
                raise JobFailed(
                    f"run {name}'s engine log {log_path} is gone from {host.target} (deleted after "
                    f"the start); `specpilot status {name}` still tells whether it runs"
                ) from None
        if not follow:
            yield data
            return
        async with followed(host, log_path, 0) as chunks:
            while True:
                chunk = await next_chunk(chunks, quiet_exit_s)
                if chunk is not None:
                    yield chunk
                    continue
                async with _answer_within(timeout_s, host, f"checking run {name}'s process"):
                    process = await recorded_process(host, state)
                if process != "running":
                    return
    finally:
        await host.close()


async def run_down(name: str, *, timeout_s: float) -> dict[str, Any]:
    """SIGTERM to each process provably the run's (launch.stop), SIGKILL after `timeout_s`;
    never by name, never to a whole group, never to a pid that now belongs to another
    process. `stopped` is a key of STOP_OUTCOMES; `phase` is "stopped" unless a process
    survived SIGKILL (`survivors` names each) or nothing could be proven the run's
    ("unproven": the recorded phase stays, `unproven` names the group's members). With the
    engine gone, what is left of it is stopped the same way (`signalled` lists them)."""
    state = read_state(name)
    host = host_for(state)
    try:
        how = await _end_proven(host, state, await recorded_process(host, state), timeout_s)
    finally:
        await host.close()
    phase = state.phase
    if how.outcome != "unproven":
        phase = "stop_failed" if how.outcome == "survived" else "stopped"
        write_state(state.stopped(phase, at_s=time.time()))
    return {
        "name": name,
        "pid": state.pid,
        "phase": phase,
        "stopped": how.outcome,
        "signalled": list(how.signalled),
        "survivors": list(how.survivors),
        "unproven": list(how.unproven),
    }
