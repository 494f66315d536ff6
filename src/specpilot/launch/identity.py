"""Whether a run's recorded pid is still the run's process: the kernel reuses pids, so
`status` and `down` check the identity recorded at start before trusting one."""

from __future__ import annotations

from typing import Any

from specpilot.hosts.base import Host
from specpilot.launch.rundir import LAUNCH_FILE
from specpilot.secrets import mask_argv


async def recorded_process(host: Host, state: dict[str, Any]) -> str:
    """Whether the state's pid is still the run's process: "running", "exited" (gone or
    a zombie) or "reused" (the pid now belongs to another process).

    The identity recorded at start is the pid's start time; a state written before
    it was recorded is checked by its argv (the engine's, or the launch script's)."""
    pid = state.get("pid")
    stat = None if pid is None else await host.proc_stat(int(pid))
    if pid is None or stat is None or stat.exited:
        return "exited"
    if state.get("start_ticks") is not None:
        return "running" if stat.start_ticks == state["start_ticks"] else "reused"
    live = await host.proc_argv(int(pid))
    launcher = ["bash", f"{state.get('remote_dir')}/{LAUNCH_FILE}"]
    if not live:
        return "exited"
    return "running" if mask_argv(live) in (state.get("argv"), launcher) else "reused"
