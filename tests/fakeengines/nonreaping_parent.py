"""Run a command under a parent that adopts orphans and never reaps them, as PID 1 of
many containers does (a subreaper that leaves SIGCHLD at its default and never waits).

    python nonreaping_parent.py CMD ARG...

Every orphan below CMD is re-parented here, and one that exits stays a zombie. When CMD
ends, the pids of the zombies held at that moment are printed as the last stdout line
(JSON `{"zombies": [...]}`), then this process exits with CMD's status. SIGTERM is passed
on to CMD (so it can stand in front of sshd).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def zombie_children() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(entry))
    return sorted(found)


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    child = subprocess.Popen(sys.argv[1:])
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    returncode = child.wait()  # waits for this one pid only: adopted orphans stay unreaped
    sys.stdout.write(json.dumps({"zombies": zombie_children()}) + "\n")
    sys.stdout.flush()
    sys.exit(returncode if returncode >= 0 else 128 - returncode)


if __name__ == "__main__":
    main()
