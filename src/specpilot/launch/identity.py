"""Whether a run's recorded pid is still the run's process: the kernel reuses pids, so
`status` and `down` check the identity recorded at start before trusting one."""

from __future__ import annotations

from specpilot.hosts.base import Host
from specpilot.launch.rundir import LAUNCH_FILE
from specpilot.launch.state import RunState
from specpilot.launch.stop import RUN_TOKEN_VAR
from specpilot.secrets import mask_argv


async def recorded_process(host: Host, state: RunState) -> str:
    """Whether the state's pid is still the run's process: "running", "exited" (gone or
    a zombie), "reused" (the pid now belongs to another process) or "unproven" (pid and
    start time match, but its environment, readable, lacks the run's token).

    The identity recorded at start is the pid's start time and the run's token; a state
    written before the start time was recorded is checked by its argv (the engine's, or
    the launch script's)."""
    stat = await host.proc_stat(state.pid)
    if stat is None or stat.exited:
        return "exited"
    if state.start_ticks is not None:
        if stat.start_ticks != state.start_ticks:
            return "reused"
        return "running" if await _holds_token(host, state) else "unproven"
    live = await host.proc_argv(state.pid)
    launcher = ["bash", f"{state.remote_dir}/{LAUNCH_FILE}"]
    if live is None:
        return "exited"
    if not live:  # a zombie's argv is empty, and so is a live process's mid-exec: ask again
        again = await host.proc_stat(state.pid)
        return "exited" if again is None or again.exited else "reused"
    return "running" if mask_argv(live) in (list(state.argv), launcher) else "reused"


async def _holds_token(host: Host, state: RunState) -> bool:
    """The run's token is in the process's environment, or the environment tells nothing: a
    title rewrite (`setproctitle`, as vLLM's) erases it, another user's cannot be read. A run
    record forged onto another process's pid and start time names a process without it."""
    env = await host.proc_env(state.pid)
    if not env or not any(env.values()):
        return True
    return state.run_token is not None and env.get(RUN_TOKEN_VAR) == state.run_token
