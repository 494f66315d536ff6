"""One `specpilot job` command per job folder at a time.

Two commands on one folder would each start, stop and restart the same servers and send the
same rows. An advisory `flock` on `FOLDER/.job.lock`, held for the whole command, refuses the
second with the holder's pid and start time; the kernel drops it when the holder dies (kill -9
included), so no stale lock is ever left. A file of its own: generate, inside the job, takes
the folder's `.lock` the same way.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from specpilot.errors import UserError
from specpilot.job.record import folder_error

LOCK_FILE = ".job.lock"


class JobLock:
    def __init__(self, folder: Path) -> None:
        try:
            self._fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise folder_error(err, folder / LOCK_FILE) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 64, 0).decode(errors="replace").split()
            os.close(self._fd)
            pid, started = [*holder, "?", "?"][:2]
            when = (
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(started)))
                if _number(started)
                else "?"
            )
            raise UserError(
                f"another `specpilot job` (pid {pid}, started at {when}) is running the job in {folder}",
                field="[job] output",
                fix="wait for it or stop it (kill -TERM it: it stops what it started), or give this job "
                "another folder",
            ) from None
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()} {time.time():.3f}\n".encode(), 0)
        except OSError as err:  # a full disk: one line, and no descriptor left holding the folder
            self.release()
            raise folder_error(err, folder / LOCK_FILE) from None

    def release(self) -> None:
        if self._fd >= 0:  # once: a closed descriptor's number may be another file's by now
            os.close(self._fd)
            self._fd = -1


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
