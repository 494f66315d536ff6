"""Progress lines for steps that take a while, for whoever reads stderr off a terminal.

A terminal shows a live line (rich's spinner or `Live`); a CI log, a pipe or
`2>build.log` shows nothing of those. There, a step that runs longer than
PROGRESS_EVERY_S says so in one line every PROGRESS_EVERY_S, with the time since it
began, and a step with phases says each new phase as it starts. A short step prints
nothing: the line at its end (if any) is its caller's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

#: how often a long step says it is still running (and the least it runs before it does)
PROGRESS_EVERY_S = 10.0

Write = Callable[[str], object]


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ProgressLines:
    """`name: phase (N s): detail` on each new phase and every `every_s` within one."""

    def __init__(
        self,
        name: str,
        *,
        every_s: float = PROGRESS_EVERY_S,
        write: Write = to_stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.every_s = every_s
        self.write = write
        self.clock = clock
        self.started_s = clock()
        self._phase: str | None = None
        self._said_at_s = self.started_s

    def elapsed_s(self) -> float:
        return self.clock() - self.started_s

    def update(self, phase: str, detail: str = "") -> None:
        """Says it when the phase is new or the last line is `every_s` old."""
        if phase != self._phase or self.clock() - self._said_at_s >= self.every_s:
            self.say(phase, detail)

    def say(self, phase: str, detail: str = "") -> None:
        now_s = self.clock()
        self._phase, self._said_at_s = phase, now_s
        tail = f": {detail}" if detail else ""
        self.write(f"{self.name}: {phase} ({now_s - self.started_s:.0f} s){tail}")


@contextlib.contextmanager
def ticking(
    name: str, doing: str, *, every_s: float = PROGRESS_EVERY_S, write: Write = to_stderr
) -> Iterator[ProgressLines]:
    """While the body blocks, a thread says `name: doing (N s)` every `every_s` (the
    first after `every_s`: a short step says nothing)."""
    lines = ProgressLines(name, every_s=every_s, write=write)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every_s):
            lines.say(doing)

    thread = threading.Thread(target=tick, name=f"progress {name}", daemon=True)
    thread.start()
    try:
        yield lines
    finally:
        stop.set()
        thread.join()
