"""launch.shield: the first ending signal interrupts, a later one (held while a stop runs)
never does, and a stop says "stopped" only with the run's port free."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from specpilot import interrupts
from specpilot.launch import shield
from specpilot.launch.state import RunState, write_state
from specpilot.launch.stop import RUN_TOKEN_VAR, new_run_token
from specpilot.spec import HostSection
from tests.fixtures.ports import free_port


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


@pytest.fixture
def own_children_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop in this process: its home, and no wait for children it did not start.

    The stop first waits (up to 30 s) for this process's children: under pytest those include
    the session's own (an sshd fixture, an xdist worker's helpers), which are not this stop's."""
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "state"))
    before = set(shield._live_children())
    live_children = shield._live_children
    monkeypatch.setattr(shield, "_live_children", lambda: [p for p in live_children() if p not in before])


def starting(name: str, folder: Path, port: int, token: str, pid: int = 0) -> RunState:
    """A run's record as `up` writes it before the spawn (pid 0), or with the engine's pid."""
    return RunState(
        name=name,
        host=HostSection(target="local"),
        remote_dir=str(folder),
        log_path=str(folder / "engine.log"),
        pid=pid,
        pgid=pid,
        run_token=token,
        endpoint=f"http://127.0.0.1:{port}",
        served_model_name=None,
        engine="sglang",
        engine_version="0.5.10",
        argv=("x",),
        phase="starting",
        cause=None,
        started_at_s=time.time(),
    )


@pytest.mark.usefixtures("own_children_only")
def test_a_stop_with_the_port_still_held_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shield, "PORT_RELEASE_S", 0.2)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        write_state(starting("held", tmp_path, port, new_run_token()))  # a start of this process's
        assert asyncio.run(shield.stop_started(["held", "never-started"])) == [
            f"held: port {port} is still held by pid {os.getpid()} after the stop"
        ]


@pytest.mark.usefixtures("own_children_only")
def test_a_stop_leaves_alone_a_run_another_process_recorded_under_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command interrupted before its own record (`up`, a bench's point) finds the record of
    a run another command started under the name: that run is not stopped."""
    token = secrets.token_hex(16)  # minted by another process
    other = subprocess.Popen(
        ["sleep", "600"], env={**os.environ, RUN_TOKEN_VAR: token}, start_new_session=True
    )
    live_children = shield._live_children  # the stand-in run is no helper the stop waits for
    monkeypatch.setattr(shield, "_live_children", lambda: [p for p in live_children() if p != other.pid])
    try:
        write_state(starting("taken", tmp_path, free_port(), token, pid=other.pid))
        assert asyncio.run(shield.stop_started(["taken"])) == []
        assert other.poll() is None
        assert not shield.started_here("taken")
    finally:
        other.kill()
        other.wait()
