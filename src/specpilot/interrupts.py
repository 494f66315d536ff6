"""Ending signals (SIGINT, SIGTERM, SIGHUP) while an event loop runs: events of the loop, never
an exception raised in whatever code runs at that instant.

A Python handler that raises (Ctrl-C's KeyboardInterrupt) raises inside the loop in whichever
task is mid-step (an aiohttp write): that task ends holding an exception no one awaits ("Task
exception was never retrieved") and asyncio.run tears the rest down around it (coroutines
"never awaited"). So while a loop runs the loop takes the signals (`loop.add_signal_handler`:
the handler runs between steps) and hands each to the innermost taker (`taken_by`). The
command's loop (`cli.loop.run`) takes them first: it cancels the command's main task on the
first signal, which each task group passes to its tasks and awaits (their cleanups run), and
raises KeyboardInterrupt once the loop has ended; a generate job's dispatcher takes them while
it sends (its first signal lets the requests in flight finish). Every signal is recorded
(`received`), inside a loop or out.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

#: the signals that end a command as Ctrl-C does
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: told each ending signal the loop takes
Taker = Callable[[signal.Signals], None]

_received: list[int] = []
_takers: list[Taker] = []


def record(signum: int) -> bool:
    """Note an ending signal; True for the first since `forget`."""
    _received.append(signum)
    return len(_received) == 1


def received() -> list[int]:
    """The ending signals received since `forget`, in order."""
    return list(_received)


def forget() -> None:
    """A command begins: no signal received yet."""
    _received.clear()


def _take(signum: signal.Signals) -> None:
    record(signum)
    _takers[-1](signum)


@contextlib.contextmanager
def taken_by(taker: Taker) -> Iterator[None]:
    """Inside, each ending signal is recorded and calls `taker(signal)` in the running loop (an
    inner `taken_by`'s taker instead); the handling before comes back after."""
    loop = asyncio.get_running_loop()
    outermost = not _takers
    before = {signum: signal.getsignal(signum) for signum in ENDING_SIGNALS}
    if outermost:
        for signum in ENDING_SIGNALS:
            loop.add_signal_handler(signum, _take, signum)
    _takers.append(taker)
    try:
        yield
    finally:
        _takers.pop()
        if outermost:
            # held while the loop gives them back (it resets each to the default first)
            held = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
            try:
                for signum, handler in before.items():
                    loop.remove_signal_handler(signum)
                    signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
