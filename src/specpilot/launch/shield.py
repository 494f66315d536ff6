"""How `up` and `bench` end on a signal: once, and with nothing they started left running.

SIGINT (Ctrl-C), SIGTERM (a scheduler's kill) and SIGHUP (the SSH session closed) each end
the command as Ctrl-C does: the first raises KeyboardInterrupt where the command is, or, in
an event loop (`cli.loop.run`), cancels the loop's work and raises it once the loop has
ended; any later one is recorded and otherwise ignored, so it cannot cut the stop short. The stop
itself (`stop_started`) runs with the three signals blocked, after the command's own
helpers (a host agent still spawning an engine) have exited, and proves what it signals
by the run's token (launch.stop), so an engine whose pid never reached the state file is
found too. It stops only a run this process recorded (a token it minted): interrupted before
its own record, a command leaves alone the run it found under the name (an earlier `up`'s,
a job's). "Stopped" is said only once each run's port is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from types import FrameType

from specpilot.errors import UserError
from specpilot.hosts import open_host_section
from specpilot.interrupts import ENDING_SIGNALS, forget, record
from specpilot.launch.state import read_state
from specpilot.launch.stop import end_group, minted_here

#: how long the stop waits for this process's helpers, and for a run's port to close
CHILDREN_EXIT_S = 30.0
PORT_RELEASE_S = 15.0
#: between SIGTERM and SIGKILL for what a stop finds (an engine mid-start has nothing to save)
STOP_TERM_S = 10.0


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if record(signum):
        raise KeyboardInterrupt


@contextlib.contextmanager
def ending_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP end the command as Ctrl-C does, once (see the module), for
    the duration of a command; the handlers before it come back after (a command run inside
    another program, as tests do)."""
    before = {signum: signal.getsignal(signum) for signum in ENDING_SIGNALS}
    forget()
    for signum in ENDING_SIGNALS:
        signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """No ending signal is delivered inside (the kernel holds it until the way out)."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _live_children() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if fields[1] == me and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


async def wait_for_children(within_s: float = CHILDREN_EXIT_S) -> list[int]:
    """Wait until this process's children have exited (a host agent that was spawning an
    engine finishes the spawn first); the ones still alive at `within_s`."""
    deadline = time.monotonic() + within_s
    while (left := _live_children()) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return left


def started_here(name: str) -> bool:
    """Whether run `name` as recorded is a start of this process's (its token minted here)."""
    try:
        return minted_here(read_state(name).run_token)
    except UserError:
        return False


async def _stop_run(name: str, only_minted_here: bool) -> str | None:
    """Stop what is provably run `name`'s (by its token, and its group while its engine
    lives), then wait for its port; a line saying what is left, or None."""
    try:
        state = read_state(name)
    except UserError:
        return None  # nothing of it was ever recorded: nothing was spawned
    if only_minted_here and not minted_here(state.run_token):
        return None  # the record is another command's: this one was stopped before its own
    host = open_host_section(state.host)
    try:
        stopped = await end_group(
            host, state.pgid, term_timeout_s=STOP_TERM_S, start_ticks=state.start_ticks, token=state.run_token
        )
        if stopped.survivors:
            return f"{name}: pid {' '.join(map(str, stopped.survivors))} survived SIGKILL"
        port = _port_of(state.endpoint)
        deadline = time.monotonic() + PORT_RELEASE_S
        while port is not None and (owner := await host.port_owner(port)) is not None:
            if time.monotonic() >= deadline:
                return f"{name}: port {port} is still held by pid {owner.pid} after the stop"
            await asyncio.sleep(0.05)
        return None
    finally:
        await host.close()


def _port_of(endpoint: str) -> int | None:
    tail = endpoint.rsplit(":", 1)[-1].split("/", 1)[0]
    return int(tail) if tail.isdigit() else None


async def stop_started(names: list[str], *, only_minted_here: bool = True) -> list[str]:
    """Stop every run in `names` (what a command started) that this process recorded, with the
    ending signals blocked so a second one cannot cut it short; a line for each run something
    of which is left. `only_minted_here=False` stops the run recorded under a name whoever
    recorded it (a job's own start, proven by the job's record). In the command's loop, or
    (after an interrupt tore that loop down) in one the command layer runs for the stop alone."""
    with signals_blocked():
        await wait_for_children()
        return [line for name in names if (line := await _stop_run(name, only_minted_here)) is not None]
