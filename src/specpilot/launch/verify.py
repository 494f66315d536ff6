"""Proof that the live process is the planned one: its argv and environment.

The launch script `exec`s the engine, so the recorded pid first shows
`bash launch.sh` and then the engine's argv; `wait_for_argv` polls through that
transition. A wrapper that re-execs with other flags matches for an instant at
most, so the supervisor verifies again while it waits and once more at readiness.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specpilot.hosts.base import Host
from specpilot.secrets import mask_argv, mask_env


@dataclass(frozen=True)
class Mismatch:
    """What differs between the plan and the live process (secrets masked)."""

    what: str  # "argv" | "env"
    diff: str


def argv_diff(planned: Sequence[str], live: Sequence[str]) -> str:
    """A unified diff, one argv element per line, secrets masked."""
    lines = difflib.unified_diff(
        mask_argv(planned),
        mask_argv(live),
        "planned argv",
        "live /proc/PID/cmdline",
        lineterm="",
        n=2,
    )
    return "\n".join(lines)


def env_diff(planned: Mapping[str, str], live: Mapping[str, str]) -> str | None:
    """Planned variables missing from or different in the live env; None when all match."""
    shown_planned, shown_live = mask_env(planned), mask_env(live)
    out = []
    for name in sorted(planned):
        if name not in live:
            out.append(f"- {name}={shown_planned[name]}   (missing in the process)")
        elif live[name] != planned[name]:
            live_shown = shown_live[name]
            if live_shown == shown_planned[name]:
                live_shown = "*** (a different secret)"
            out.append(f"- {name}={shown_planned[name]}\n+ {name}={live_shown}")
    return "\n".join(out) or None


async def wait_for_argv(
    host: Host,
    pid: int,
    planned: Sequence[str],
    launcher: Sequence[str],
    *,
    timeout_s: float = 5.0,
    poll_s: float = 0.02,
) -> list[str] | None:
    """Poll /proc/PID/cmdline while it still shows `launcher` (bash launch.sh, before its
    exec), or reads empty while the process still runs (mid-exec: a wrapper that re-execs),
    up to `timeout_s`. Returns the argv seen after that (None when the process is gone or
    exiting): the planned one, or whatever replaced the launcher instead."""
    deadline = time.monotonic() + timeout_s
    live = await host.proc_argv(pid)
    while time.monotonic() < deadline and (
        list(live) == list(launcher) if live else await running(host, pid)
    ):
        await asyncio.sleep(poll_s)
        live = await host.proc_argv(pid)
    return live or None


async def running(host: Host, pid: int) -> bool:
    """The process exists and has not exited (a zombie has)."""
    stat = await host.proc_stat(pid)
    return stat is not None and not stat.exited


async def check_live(host: Host, pid: int, argv: Sequence[str], env: Mapping[str, str]) -> Mismatch | None:
    """Compare the live process right now; None when it matches or has exited.

    Exit beats argv: a process that is gone, a zombie, or whose cmdline reads empty
    (as an exiting one does) has exited, and its log says why; a difference counts
    only while the process is still running after it was read."""
    live_argv = await host.proc_argv(pid)
    if not live_argv:
        return None
    if list(live_argv) != list(argv):
        return Mismatch("argv", argv_diff(argv, live_argv)) if await running(host, pid) else None
    live_env = await host.proc_env(pid)
    if not live_env:
        return None
    diff = env_diff(env, live_env)
    if diff is None or not await running(host, pid):
        return None
    return Mismatch("env", diff)
