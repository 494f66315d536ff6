"""Ports for test servers: a port that another test session on this machine holds is not
handed out (the "port is already held" failures of two sessions walking one block)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.fixtures import ports

HOLD = """\
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_port_another_session_claimed_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    taken, next_free = ports.free_port(), ports.free_port()
    os.close(ports._claims.pop(taken))  # let go of it, as if never handed out here
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(ports.CLAIMS_DIR / f"{taken}.lock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        assert ports.is_free(taken)  # free on the network: only the claim says it is not ours
        monkeypatch.setattr(ports, "_NEXT", iter([taken, next_free]))
        assert ports.free_port() == next_free
    finally:
        other.kill()
        other.wait()
