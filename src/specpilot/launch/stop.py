"""Stopping a run: its whole process group, politely then firmly; never by name."""

from __future__ import annotations

import asyncio
import signal
import time

from specpilot.hosts.base import Host


async def group_alive(host: Host, pgid: int) -> bool:
    """Signal 0 to the group: True while any member exists."""
    return await host.signal_group(pgid, 0)


async def stop_group(host: Host, pgid: int, *, term_timeout_s: float, poll_s: float = 0.05) -> str:
    """SIGTERM the group, wait up to `term_timeout_s`, then SIGKILL.

    Returns how it ended: "not_running", "terminated" or "killed"."""
    if not await host.signal_group(pgid, signal.SIGTERM):
        return "not_running"
    deadline = time.monotonic() + term_timeout_s
    while time.monotonic() < deadline:
        if not await _group_or_leader_alive(host, pgid):
            return "terminated"
        await asyncio.sleep(poll_s)
    await host.signal_group(pgid, signal.SIGKILL)
    kill_deadline = time.monotonic() + 5.0
    while time.monotonic() < kill_deadline and await _group_or_leader_alive(host, pgid):
        await asyncio.sleep(poll_s)
    return "killed"


async def _group_or_leader_alive(host: Host, pgid: int) -> bool:
    # A zombie leader still "exists" for kill(0); pid_alive excludes zombies, and the
    # group check covers children that outlive the leader.
    if await host.pid_alive(pgid):
        return True
    return await _non_leader_members_alive(host, pgid)


async def _non_leader_members_alive(host: Host, pgid: int) -> bool:
    result = await host.run(["pgrep", "-g", str(pgid)], check=False, timeout_s=10.0)
    if result.returncode not in (0, 1):  # no pgrep on the host: trust the group signal
        return await group_alive(host, pgid)
    for word in result.stdout.split():
        pid = int(word)
        if pid != pgid and await host.pid_alive(pid):
            return True
    return False
