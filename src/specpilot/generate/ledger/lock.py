"""One `generate` per output directory at a time.

Two processes resuming the same directory would both send the pending rows and both
write them: exactly-once needs a single writer. An advisory `flock` on `DIR/.lock`
gives that, and the kernel releases it when the holder dies (even by kill -9), so a
crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from specpilot.errors import UserError

LOCK_FILE = ".lock"


class DirectoryLock:
    def __init__(self, directory: Path) -> None:
        self._path = directory / LOCK_FILE
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            raise UserError(
                f"another `specpilot generate` (pid {holder}) is writing {directory}",
                field="--output",
                fix="wait for it, stop it, or use another directory",
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        os.close(self._fd)


def is_held(directory: Path) -> bool:
    """Whether a `generate` holds `directory`'s lock now (a job runs there). Never creates
    the lock file, and never blocks: a shared lock is tried, and released at once."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing the descriptor drops the shared lock, if taken
    return False
