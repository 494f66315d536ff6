"""launch.shield: the first ending signal interrupts, a later one (held while a stop runs)
never does, and a stop says "stopped" only with the run's port free."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from specpilot import interrupts
from specpilot.launch import shield
from specpilot.launch.state import RunState, write_state
from specpilot.spec import HostSection


def wait_received(count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(interrupts.received()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return interrupts.received()


def test_the_first_signal_interrupts_and_one_held_during_the_stop_does_not() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with shield.ending_signals():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGHUP)
            wait_received(1)
        with shield.signals_blocked():
            # to this thread: a signal sent to the process may be taken by another thread that
            # earlier tests left (an executor's), whose mask is its own (the handler then only
            # records it, as a second signal)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            time.sleep(0.05)
            assert interrupts.received() == [signal.SIGHUP]  # held by the kernel: the stop goes on
        assert wait_received(2) == [signal.SIGHUP, signal.SIGTERM]  # arrived, raised nothing
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_with_the_port_still_held_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(shield, "PORT_RELEASE_S", 0.2)
    # the stop first waits (up to 30 s) for this process's children: under pytest those include
    # the session's own (an sshd fixture, an xdist worker's helpers), which are not this stop's
    before = set(shield._live_children())
    live_children = shield._live_children
    monkeypatch.setattr(shield, "_live_children", lambda: [p for p in live_children() if p not in before])
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        write_state(
            RunState(
                name="held",
                host=HostSection(target="local"),
                remote_dir=str(tmp_path),
                log_path=str(tmp_path / "engine.log"),
                pid=0,
                pgid=0,
                run_token="f" * 32,
                endpoint=f"http://127.0.0.1:{port}",
                served_model_name=None,
                engine="sglang",
                engine_version="0.5.10",
                argv=("x",),
                phase="starting",
                cause=None,
                started_at_s=time.time(),
            )
        )
        assert asyncio.run(shield.stop_started(["held", "never-started"])) == [
            f"held: port {port} is still held by pid {os.getpid()} after the stop"
        ]
