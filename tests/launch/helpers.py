"""Running `launch` and inspecting what it left behind."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from specpilot.check.resolved import release_of
from specpilot.hosts import open_host
from specpilot.hosts.base import Host
from specpilot.launch.state import RunState
from specpilot.launch.stop import RunProcesses, run_members
from specpilot.launch.supervisor import UpOptions, UpResult, launch_planned
from specpilot.plan import Plan
from specpilot.spec import HostSection, Spec


def ready_state(name: str, **changes: Any) -> RunState:
    """A ready run's state as `up` records it on this machine, with `changes` applied."""
    run_dir = f"/home/u/.specpilot/runs/{name}"
    state = RunState(
        name=name,
        host=HostSection(target="local"),
        remote_dir=run_dir,
        log_path=f"{run_dir}/engine.log",
        exit_path=f"{run_dir}/exit",
        pid=4321,
        pgid=4321,
        start_ticks=987654,
        endpoint="http://127.0.0.1:30000",
        served_model_name="qwen",
        engine="sglang",
        engine_version="0.5.13",
        argv=("python3", "-m", "sglang.launch_server", "--model-path", "/m", "--port", "30000"),
        phase="ready",
        cause="ready",
        started_at_s=1_780_000_000.0,
        allocations={"kv_cache_gib": 60.5, "max_total_num_tokens": 812_000},
        ready_log_bytes=2048,
    )
    return dataclasses.replace(state, **changes)


def local_host() -> Host:
    return open_host("local")


def up(
    spec: Spec,
    *,
    plan: Plan | None = None,
    options: UpOptions | None = None,
    host: Host | None = None,
) -> UpResult:
    async def go() -> UpResult:
        the_host = host or local_host()
        try:
            return await launch_planned(spec, release_of(spec), the_host, plan=plan, options=options)
        finally:
            await the_host.close()

    return asyncio.run(go())


def group_alive(pgid: int, host: Host | None = None) -> bool:
    """Whether any live process is in group `pgid`, the run's by proof or not (with no start
    time to prove by, every member is unproven: `group_members` alone would say none)."""

    async def go() -> bool:
        the_host = host or local_host()
        try:
            proven, unproven = await run_members(the_host, RunProcesses(pgid))
            return bool(proven or unproven)
        finally:
            await the_host.close()

    return asyncio.run(go())
