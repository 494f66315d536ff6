"""A signal to `up` the moment its engine appears is not lost: the start ends (exit 130)
and nothing of it is left running. Synchronised on the pid file `up` writes (no sleeps)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specpilot.launch.ops import run_down, run_status
from specpilot.launch.state import read_state, write_state
from specpilot.spec import HostSection
from tests.bench.test_bench_signals import holding
from tests.fixtures.engines import process_group_members
from tests.launch.conftest import SpecFactory
from tests.launch.helpers import up

ROOT = Path(__file__).resolve().parents[2]


def wait_for(path: Path, process: subprocess.Popen[str], within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


@contextlib.contextmanager
def _up(spec_path: Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """`specpilot up SPEC` as a shell starts it; killed if the test leaves it running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "specpilot", "up", str(spec_path), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _signalled_as_its_engine_appears(
    spec_path: Path, sig: signal.Signals, *extra: str
) -> tuple[str, str, int]:
    """`up` sent `sig` once its engine's pid file is written: its stdout, stderr and exit."""
    with _up(spec_path, *extra) as process:
        wait_for(Path(os.environ["SPECPILOT_HOME"]) / "runs" / spec_path.stem / "pid", process)
        process.send_signal(sig)
        out, err = process.communicate(timeout=60)
    return out, err, process.returncode


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["int", "term", "hup"])
def test_a_signal_as_the_engine_appears_ends_up(
    sig: signal.Signals, make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    make_spec("sglang_ready", name="caught")
    out, err, returncode = _signalled_as_its_engine_appears(tmp_path / "caught.toml", sig)
    assert returncode == 130, out + err
    assert "interrupted: caught is stopped" in err
    state = read_state("caught")
    assert state.phase != "ready"
    assert holding(state.run_token or "") == []
    assert state.pgid == 0 or process_group_members(state.pgid) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["int", "term"])
def test_an_up_interrupted_before_its_start_leaves_the_run_already_serving_alone(
    sig: signal.Signals, make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """A second `up` of a name that is serving first checks that run on the run's host (a
    remote one may be slow to answer), before it records or starts anything of its own;
    interrupted there, it stopped the serving run, which it never started. While the check
    runs the record points at a listener that accepts and never answers (the slow host); it
    is put back before the signal, so a stop that acted on it would reach the live server."""
    spec = make_spec("sglang_ready", name="serving")
    assert up(spec).phase == "ready"
    recorded = read_state("serving")
    try:
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            silent.settimeout(60)
            slow = f"ssh://{getpass.getuser()}@127.0.0.1:{silent.getsockname()[1]}"
            write_state(dataclasses.replace(recorded, host=HostSection(target=slow)))
            with _up(tmp_path / "serving.toml") as process:
                connection, _ = silent.accept()  # the check is connecting to the run's host
                with connection:
                    write_state(recorded)
                    process.send_signal(sig)
                    out, err = process.communicate(timeout=60)
        assert process.returncode == 130, out + err
        assert "interrupted before serving was started: nothing was stopped" in err, err
        status = asyncio.run(run_status("serving", lines=0))
        assert (status.pid, status.serving) == (recorded.pid, True), err
    finally:
        asyncio.run(run_down("serving", timeout_s=5.0))


def test_a_signal_under_json_is_one_json_object(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """`up --json` ended by a signal: stdout held nothing (the stop was said on stderr only)."""
    make_spec("sglang_ready", name="caught")
    out, err, returncode = _signalled_as_its_engine_appears(
        tmp_path / "caught.toml", signal.SIGTERM, "--json"
    )
    assert returncode == 130, out + err
    shown = json.loads(out)
    assert set(shown) == {"error", "fix", "exit"} and shown["exit"] == 130, shown
    assert shown["error"] == "interrupted: caught is stopped" and "same command" in shown["fix"], shown
    assert "interrupted: caught is stopped" in err
