"""Stopping a run: its whole process group, politely then firmly; never by name."""

from __future__ import annotations

import asyncio
import signal
import time

from specpilot.hosts.base import Host


async def group_members(host: Host, pgid: int) -> list[int]:
    """Live (non-zombie) processes of the group, read with `pgrep -g` on the host."""
    result = await host.run(["pgrep", "-g", str(pgid)], check=False, timeout_s=10.0)
    members = []
    for word in result.stdout.split():
        pid = int(word)
        if await host.pid_alive(pid):
            members.append(pid)
    return members


async def stop_group(host: Host, pgid: int, *, term_timeout_s: float, poll_s: float = 0.05) -> str:
    """SIGTERM the group, wait up to `term_timeout_s`, then SIGKILL.

    Returns how it ended: "not_running", "terminated" or "killed"."""
    if not await group_members(host, pgid) or not await host.signal_group(pgid, signal.SIGTERM):
        return "not_running"
    deadline = time.monotonic() + term_timeout_s
    while time.monotonic() < deadline:
        if not await group_members(host, pgid):
            return "terminated"
        await asyncio.sleep(poll_s)
    await host.signal_group(pgid, signal.SIGKILL)
    kill_deadline = time.monotonic() + 5.0
    while time.monotonic() < kill_deadline and await group_members(host, pgid):
        await asyncio.sleep(poll_s)
    return "killed"
