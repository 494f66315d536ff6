"""Stopping a run: its whole process group, politely then firmly; never by name.

The whole stop (SIGTERM, wait for every member, SIGKILL) runs as one short
script on the host, so over SSH it costs one round trip instead of one per poll;
that round trip is most of the time between a fatal line and `up` returning.
A member is any non-zombie process whose process group is the run's (from
/proc/PID/stat), so helper processes that outlive the engine are found too, and any
descendant of one that left the group (`setsid`), found by parent pid before the
first signal and known after by its start time.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpilot.hosts.base import Host

# argv: MODE PGID TERM_TIMEOUT_S DELAY_S START_TICKS; MODE "members" prints the live pids
# of the group, MODE "stop" waits DELAY_S, then reports one of STOP_OUTCOMES with the pids
# it signalled and those still alive ("OUTCOME|PIDS|PIDS"). START_TICKS (-1: unknown) is the
# leader's start time when it was started: a leader alive with another start time is a
# recycled pid, and nothing is signalled ("stale"); with the leader gone, a member counts only
# if it started no earlier than the leader did (the run's own children, not an older group's).
_GROUP_SCRIPT = """\
import os, signal, sys, time
mode, pgid, term_s, delay_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
start_ticks = int(sys.argv[5])
def stat_of(pid):
    try:
        with open("/proc/%s/stat" % pid) as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()
def table():
    found = {}
    for entry in os.listdir("/proc"):
        fields = stat_of(entry) if entry.isdigit() else None
        if fields:
            found[int(entry)] = (fields[0], int(fields[1]), int(fields[2]), int(fields[19]))
    return found
def escaped():
    # descendants that left the group (setsid): found now, while their parents still live
    procs = table()
    inside = [pid for pid, (_, _, group, _) in procs.items() if group == pgid]
    children = {}
    for pid, (_, parent, _, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    found, pending = {}, list(inside)
    while pending:
        for child in children.get(pending.pop(), []):
            if procs[child][2] != pgid and child not in found:
                found[child] = procs[child][3]
                pending.append(child)
    return found
outside = {}
def members():
    procs = table()
    alive = [pid for pid, (state, _, group, ticks) in procs.items()
             if group == pgid and state != "Z" and ticks >= start_ticks]
    for pid, ticks in outside.items():
        if pid in procs and procs[pid][3] == ticks and procs[pid][0] != "Z":
            alive.append(pid)
    return sorted(alive)
def wait_empty(seconds):
    deadline = time.monotonic() + seconds
    while members():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
def signal_group(signum):
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass
    for pid in members():
        if pid in outside:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
def report(outcome, ended=(), left=()):
    print("%s|%s|%s" % (outcome, " ".join(map(str, ended)), " ".join(map(str, left))))
outside = escaped()
if mode == "members":
    print(" ".join(map(str, members())))
    sys.exit(0)
time.sleep(delay_s)
leader = stat_of(pgid)
found = members()
if start_ticks >= 0 and leader is not None and int(leader[19]) != start_ticks:
    report("stale")
elif not found:
    report("not_running")
else:
    signal_group(signal.SIGTERM)
    if wait_empty(term_s):
        report("terminated", found)
    else:
        signal_group(signal.SIGKILL)
        if wait_empty(5.0):
            report("killed", found)
        else:
            report("survived", found, members())
"""


#: what `stop_group` may answer, as `down` says it
STOP_OUTCOMES = {
    "not_running": "was not running",
    "terminated": "stopped",
    "killed": "killed (SIGKILL: it did not end within the timeout after SIGTERM)",
    "survived": "survived SIGKILL: a member is still there, most likely in uninterruptible "
    "sleep (state D, e.g. stuck in the GPU driver); see `ps -o pid,stat,cmd -g PGID` on the host",
    "stale": "was not signalled: its pid now belongs to another process (started after the run), "
    "so the run's process is gone",
}


@dataclass(frozen=True)
class GroupStop:
    """How a stop ended: a STOP_OUTCOMES key, the members it signalled, those still alive."""

    outcome: str
    signalled: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()


async def _group_script(
    host: Host,
    mode: str,
    pgid: int,
    term_timeout_s: float,
    delay_s: float = 0.0,
    start_ticks: int | None = None,
) -> str:
    ticks = -1 if start_ticks is None else start_ticks
    result = await host.run(
        ["python3", "-c", _GROUP_SCRIPT, mode, str(pgid), str(term_timeout_s), str(delay_s), str(ticks)],
        timeout_s=delay_s + term_timeout_s + 30.0,
    )
    return result.stdout.decode().strip()


async def group_members(host: Host, pgid: int, start_ticks: int | None = None) -> list[int]:
    """Live (non-zombie) processes of the group (started no earlier than `start_ticks`)."""
    return [int(pid) for pid in (await _group_script(host, "members", pgid, 0.0, 0.0, start_ticks)).split()]


async def end_group(
    host: Host,
    pgid: int,
    *,
    term_timeout_s: float,
    delay_s: float = 0.0,
    start_ticks: int | None = None,
) -> GroupStop:
    """After `delay_s`, SIGTERM the group, wait up to `term_timeout_s` for every member,
    then SIGKILL. (The delay lets a caller start the stop's round trip while it still
    reads the last lines of an error.) With `start_ticks`, a leader that is alive but
    started at another time is someone else's process: nothing is signalled; with the
    leader gone, what is left of its group (a helper that outlived the engine) is ended.

    The outcome is "not_running", "terminated", "killed", "survived" (a process in
    uninterruptible sleep that even SIGKILL did not end within 5 s) or "stale"."""
    answer = await _group_script(host, "stop", pgid, term_timeout_s, delay_s, start_ticks)
    outcome, _, rest = answer.partition("|")
    signalled, _, left = rest.partition("|")
    return GroupStop(outcome, tuple(map(int, signalled.split())), tuple(map(int, left.split())))


async def stop_group(
    host: Host,
    pgid: int,
    *,
    term_timeout_s: float,
    delay_s: float = 0.0,
    start_ticks: int | None = None,
) -> str:
    """`end_group`'s outcome alone: a key of STOP_OUTCOMES."""
    stopped = await end_group(
        host, pgid, term_timeout_s=term_timeout_s, delay_s=delay_s, start_ticks=start_ticks
    )
    return stopped.outcome
