"""Stopping a run: only processes provably its own, politely then firmly; never by name.

The whole stop (SIGTERM, wait for every member, SIGKILL) runs as one short
script on the host, so over SSH it costs one round trip instead of one per poll;
that round trip is most of the time between a fatal line and `up` returning.

A process is the run's only with proof, checked again on a handle of the process
(pidfd) immediately before each signal, so a pid recycled meanwhile is never hit:
it is a live process of this user that started no earlier than the engine, and
- it is in the engine's process group while the engine's pid still names the engine
  (same start time, and the run's token in its environment where that can be read): the
  kernel reuses no group number while its leader's pid is held;
- or it holds the run's token in its environment (`SPECPILOT_RUN_TOKEN`, set by `up`
  on the engine and inherited by its children): found even after the engine died,
  in its old group or in one of its own (`setsid`); one such member of the engine's group
  proves the whole group the run's (no group number is reused while the group has a member),
  so a process whose title rewrite (`setproctitle`, as vLLM's EngineCore) erased its
  environment is found too;
- or it descends from such a process (found by parent pid) and left the group.
A group member without proof (a record of an older release without the engine's
start time or token, or a group number another session took over) is reported,
never signalled; nothing is ever sent to a whole group (killpg), to a caller of the
stop (the CLI, its shell, the SSH session), nor by group proof to group 1 or to a
caller's group or session.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from specpilot.hosts.base import Host

#: the environment variable that marks every process of one run (a random value per start)
RUN_TOKEN_VAR = "SPECPILOT_RUN_TOKEN"

#: the run tokens this process minted: a run recorded with one of them is a start of its own
_minted_tokens: set[str] = set()


def new_run_token() -> str:
    """A fresh run token (a start's), remembered as this process's (`minted_here`)."""
    token = secrets.token_hex(16)
    _minted_tokens.add(token)
    return token


def minted_here(token: str | None) -> bool:
    """Whether this process minted `token`, so the run recorded with it is one it started."""
    return token in _minted_tokens


# argv: MODE PGID TERM_TIMEOUT_S DELAY_S START_TICKS TOKEN. START_TICKS (-1: unknown) is the
# engine's start time when it was started; TOKEN ("-": none) the run's token. MODE "members"
# prints "PROVEN|UNPROVEN" (live pids); MODE "stop" waits DELAY_S, then prints one of
# STOP_OUTCOMES as "OUTCOME|SIGNALLED|SURVIVORS|UNPROVEN".
_GROUP_SCRIPT = """\
import errno, os, signal, sys, time
mode, pgid, term_s, delay_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
start_ticks, token = int(sys.argv[5]), sys.argv[6]
marker = ("SPECPILOT_RUN_TOKEN=" + token).encode() if token != "-" else None
uid, me = os.getuid(), os.getpid()
def stat_of(pid):
    # (state, ppid, pgid, start ticks, owner uid), or None once it is gone
    try:
        with open("/proc/%s/stat" % pid) as handle:
            stat = handle.read()
        owner = os.stat("/proc/%s" % pid).st_uid
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (fields[0], int(fields[1]), int(fields[2]), int(fields[19]), owner)
def callers():
    # this script's callers (the CLI, its shell, an SSH session): their pids, groups and sessions
    pids, groups, pid = {me}, {0, 1, os.getpgrp(), os.getsid(0)}, os.getppid()
    while pid > 1:
        try:
            with open("/proc/%s/stat" % pid) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            break
        pids.add(pid)
        groups |= {int(fields[2]), int(fields[3])}
        pid = int(fields[1])
    return pids, groups
ancestors, forbidden = callers()
def table():
    found = {}
    for entry in os.listdir("/proc"):
        stat = stat_of(entry) if entry.isdigit() and int(entry) not in ancestors else None
        if stat:
            found[int(entry)] = stat
    return found
def holds_token(pid):
    if marker is None:
        return False
    try:
        with open("/proc/%s/environ" % pid, "rb") as handle:
            return marker in handle.read().split(b"\\0")
    except OSError:
        return False
def lacks_token(pid):
    # a readable environment (NAME=value entries: a title rewrite erases them) without the
    # run's token: not the run's, whatever its start time (a record forged onto another process)
    if marker is None:
        return False
    try:
        with open("/proc/%s/environ" % pid, "rb") as handle:
            entries = [e for e in handle.read().split(b"\\0") if b"=" in e]
    except OSError:
        return False
    return bool(entries) and marker not in entries
def leader_is_engine():
    if start_ticks < 0 or pgid in forbidden:
        return False
    leader = stat_of(pgid)
    return leader is not None and leader[3] == start_ticks and leader[4] == uid and not lacks_token(pgid)
def stale():
    leader = stat_of(pgid) if pgid not in forbidden else None
    return start_ticks >= 0 and leader is not None and leader[3] != start_ticks
descendants = {}  # of proven processes, found by parent pid: pid -> start ticks
in_group = {}  # members of the group seen while it was proven the run's: pid -> start ticks
tokens = {}  # (pid, start ticks) -> holds the token (an environment is read once)
def token_of(pid, stat, cached=True):
    key = (pid, stat[3])
    if not cached or key not in tokens:
        tokens[key] = holds_token(pid)
    return tokens[key]
def plausible(pid, stat):
    return pid not in ancestors and stat is not None and stat[0] not in "ZX" and stat[4] == uid \
        and stat[3] >= start_ticks
def group_is_run(procs):
    # no group number is reused while a process is in the group: one member proven the run's
    # (by the token) proves them all, e.g. an engine process whose title rewrite (setproctitle)
    # erased its environment
    if pgid in forbidden:
        return False
    inside = [(pid, stat) for pid, stat in procs.items() if stat[2] == pgid and plausible(pid, stat)]
    known = any(in_group.get(pid) == stat[3] for pid, stat in inside)
    return leader_is_engine() or known or any(token_of(pid, stat) for pid, stat in inside)
def proven(pid, stat, cached=True, run_group=False):
    if not plausible(pid, stat):
        return False
    if descendants.get(pid) == stat[3] or in_group.get(pid) == stat[3]:
        return True
    if stat[2] == pgid and (run_group or leader_is_engine()):
        return True
    return token_of(pid, stat, cached)
def members():
    procs = table()
    run_group = group_is_run(procs)
    found = [pid for pid, stat in procs.items() if proven(pid, stat, run_group=run_group)]
    for pid in found:
        if procs[pid][2] == pgid:
            in_group[pid] = procs[pid][3]
    children = {}
    for pid, stat in procs.items():
        children.setdefault(stat[1], []).append(pid)
    pending = list(found)
    while pending:
        for child in children.get(pending.pop(), []):
            stat = procs[child]
            if child not in found and plausible(child, stat):
                descendants[child] = stat[3]
                found.append(child)
                pending.append(child)
    unproven = [pid for pid, stat in procs.items()
                if stat[2] == pgid and stat[0] not in "ZX" and pid not in found and pgid not in forbidden]
    return sorted(found), sorted(unproven)
def send(pid, signum):
    # proved again on a handle of the process itself: a recycled pid is never signalled
    handle = None
    try:
        handle = os.pidfd_open(pid)
    except AttributeError:
        pass
    except OSError as err:
        if err.errno == errno.ESRCH:
            return
    try:
        if proven(pid, stat_of(pid), cached=False):
            if handle is None:
                os.kill(pid, signum)
            else:
                signal.pidfd_send_signal(handle, signum)
    except OSError:
        pass
    finally:
        if handle is not None:
            os.close(handle)
def wait_empty(seconds, signum, sent):
    deadline = time.monotonic() + seconds
    while True:
        alive = members()[0]
        for pid in alive:
            if pid not in sent:  # a member that appeared since (a late fork)
                sent.add(pid)
                send(pid, signum)
        if not alive:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
def report(outcome, ended=(), left=(), unproven=()):
    print("%s|%s|%s|%s" % (outcome, " ".join(map(str, ended)), " ".join(map(str, left)),
                           " ".join(map(str, unproven))))
if mode == "members":
    found, unproven = members()
    print("%s|%s" % (" ".join(map(str, found)), " ".join(map(str, unproven))))
    sys.exit(0)
time.sleep(delay_s)
found, unproven = members()
if not found and stale():
    report("stale")
elif not found:
    # group 0: no pid was recorded (a start interrupted mid-spawn), so there is no group to doubt
    report("unproven" if unproven or pgid in forbidden - {0} else "not_running", unproven=unproven)
else:
    sent = set()
    if wait_empty(term_s, signal.SIGTERM, sent):
        report("terminated", sorted(sent), unproven=unproven)
    else:
        sent_term, sent = sent, set()
        if wait_empty(5.0, signal.SIGKILL, sent):
            report("killed", sorted(sent_term | sent), unproven=unproven)
        else:
            report("survived", sorted(sent_term | sent), members()[0], unproven)
"""


#: what `end_group` may answer, as `down` says it
STOP_OUTCOMES = {
    "not_running": "was not running",
    "terminated": "stopped",
    "killed": "killed (SIGKILL: it did not end within the timeout after SIGTERM)",
    "survived": "survived SIGKILL: a member is still there, most likely in uninterruptible "
    "sleep (state D, e.g. stuck in the GPU driver); see `ps -o pid,stat,cmd -g PGID` on the host",
    "stale": "was not signalled: its pid now belongs to another process (started after the run), "
    "so the run's process is gone",
    "unproven": "was not signalled: nothing proves its processes are the run's (a record without the "
    "engine's start time, or a group number now used by others); check `ps -o pid,lstart,cmd -g PGID` "
    "on the host and stop what is yours by pid",
}


@dataclass(frozen=True)
class GroupStop:
    """How a stop ended: a STOP_OUTCOMES key, the processes it signalled, those still alive,
    and the group members it left alone for want of proof."""

    outcome: str
    signalled: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()
    unproven: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunProcesses:
    """A run's identity as recorded at start: what the stop script proves membership by."""

    pgid: int
    start_ticks: int | None = None
    token: str | None = None


def _pids(text: str) -> tuple[int, ...]:
    return tuple(int(pid) for pid in text.split())


async def _group_script(
    host: Host, mode: str, run: RunProcesses, term_timeout_s: float, delay_s: float = 0.0
) -> str:
    ticks = -1 if run.start_ticks is None else run.start_ticks
    result = await host.run(
        [
            "python3",
            "-c",
            _GROUP_SCRIPT,
            mode,
            str(run.pgid),
            str(term_timeout_s),
            str(delay_s),
            str(ticks),
            run.token or "-",
        ],
        timeout_s=delay_s + term_timeout_s + 30.0,
    )
    return result.stdout.decode().strip()


async def run_members(host: Host, run: RunProcesses) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Without signalling: the run's live processes, and the live members of its group
    that cannot be proven the run's."""
    proven, _, unproven = (await _group_script(host, "members", run, 0.0)).partition("|")
    return _pids(proven), _pids(unproven)


async def group_members(host: Host, pgid: int, start_ticks: int | None = None) -> list[int]:
    """Live processes of a group whose leader started at `start_ticks` (proven members only)."""
    return list((await run_members(host, RunProcesses(pgid, start_ticks)))[0])


async def end_group(
    host: Host,
    pgid: int,
    *,
    term_timeout_s: float,
    delay_s: float = 0.0,
    start_ticks: int | None = None,
    token: str | None = None,
) -> GroupStop:
    """After `delay_s`, SIGTERM each process proven the run's, wait up to `term_timeout_s`
    for every one, then SIGKILL. (The delay lets a caller start the stop's round trip while
    it still reads the last lines of an error.) A leader alive with another start time is
    someone else's process: nothing is signalled ("stale"); group members without proof are
    left alone and named (`unproven`, outcome "unproven" when nothing else was found).

    The outcome is a key of STOP_OUTCOMES: "not_running", "terminated", "killed", "survived"
    (a process in uninterruptible sleep that even SIGKILL did not end within 5 s), "stale"
    or "unproven"."""
    run = RunProcesses(pgid, start_ticks, token)
    answer = await _group_script(host, "stop", run, term_timeout_s, delay_s)
    outcome, signalled, left, unproven = [*answer.split("|"), "", "", ""][:4]
    return GroupStop(outcome, _pids(signalled), _pids(left), _pids(unproven))


async def stop_group(
    host: Host,
    pgid: int,
    *,
    term_timeout_s: float,
    delay_s: float = 0.0,
    start_ticks: int | None = None,
    token: str | None = None,
) -> str:
    """`end_group`'s outcome alone: a key of STOP_OUTCOMES."""
    stopped = await end_group(
        host, pgid, term_timeout_s=term_timeout_s, delay_s=delay_s, start_ticks=start_ticks, token=token
    )
    return stopped.outcome
