"""Whether a run's recorded pid is still the run's process: the kernel reuses pids, so
`status` and `down` check the identity recorded at start before trusting one."""

from __future__ import annotations

from specpilot.hosts.base import Host
from specpilot.launch.rundir import LAUNCH_FILE
from specpilot.launch.state import RunState
from specpilot.secrets import mask_argv


async def recorded_process(host: Host, state: RunState) -> str:
    """Whether the state's pid is still the run's process: "running", "exited" (gone or
    a zombie) or "reused" (the pid now belongs to another process).

    The identity recorded at start is the pid's start time; a state written before
    it was recorded is checked by its argv (the engine's, or the launch script's)."""
    stat = await host.proc_stat(state.pid)
    if stat is None or stat.exited:
        return "exited"
    if state.start_ticks is not None:
        return "running" if stat.start_ticks == state.start_ticks else "reused"
    live = await host.proc_argv(state.pid)
    launcher = ["bash", f"{state.remote_dir}/{LAUNCH_FILE}"]
    if live is None:
        return "exited"
    if not live:  # a zombie's argv is empty, and so is a live process's mid-exec: ask again
        again = await host.proc_stat(state.pid)
        return "exited" if again is None or again.exited else "reused"
    return "running" if mask_argv(live) in (list(state.argv), launcher) else "reused"
