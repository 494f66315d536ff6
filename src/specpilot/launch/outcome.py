"""What `up` is asked to do (options) and what it returns (the outcome `--json` prints)."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from specpilot.engines.fix import Fix

#: progress callback: (phase, elapsed_s, last meaningful line)
Progress = Callable[[str, float, str | None], None]
#: test seam: runs after shipping, before the re-verification and the start
AfterShip = Callable[[str], Awaitable[None]]


def describe_returncode(returncode: int) -> str:
    """'exited with status 1' or 'was killed by SIGKILL (signal 9)'."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "a signal"
    return f"was killed by {name} (signal {-returncode})"


@dataclass
class UpOptions:
    grace_s: float = 0.5  # after a fatal line: collect the rest of the error at most this long
    quiet_s: float = 0.2  # ... or until the log has been quiet this long (the block ended)
    term_timeout_s: float = 0.3  # on failure: SIGTERM, then SIGKILL after this
    verify_timeout_s: float = 5.0  # bash launch.sh -> exec engine transition
    reverify_every_s: float = 1.0
    health_every_s: float = 2.0  # before the log says ready
    health_fast_every_s: float = 0.2  # after the log says ready
    after_ship: AfterShip | None = None


@dataclass
class UpResult:
    """The outcome, shaped as `specpilot up --json` prints it."""

    name: str
    phase: str  # "ready" | "failed" | "refused" (check or plan said no; nothing was started)
    cause: str
    error: str | None = None
    fix: Fix | None = None
    pid: int | None = None
    endpoint: str | None = None
    allocations: dict[str, int | float] = field(default_factory=dict)
    plan_diff: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    last_phase: str | None = None
    remote_dir: str | None = None
    #: how the engine process ended, when it did and the host could know (-N: signal N)
    exit_status: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "cause": self.cause,
            "error": self.error,
            "fix": None if self.fix is None else self.fix.shown().to_json(),
            "pid": self.pid,
            "endpoint": self.endpoint,
            "allocations": self.allocations,
            "plan_diff": self.plan_diff,
            "elapsed_s": round(self.elapsed_s, 3),
            "last_phase": self.last_phase,
            "run_dir": self.remote_dir,
            "exit_status": self.exit_status,
        }
