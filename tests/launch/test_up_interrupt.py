"""A signal to `up` the moment its engine appears is not lost: the start ends (exit 130)
and nothing of it is left running. Synchronised on the pid file `up` writes (no sleeps)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specpilot.launch.state import read_state
from tests.bench.test_bench_signals import holding
from tests.fixtures.engines import process_group_members
from tests.launch.conftest import SpecFactory

ROOT = Path(__file__).resolve().parents[2]


def wait_for(path: Path, process: subprocess.Popen[str], within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["int", "term", "hup"])
def test_a_signal_as_the_engine_appears_ends_up(
    sig: signal.Signals, make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    make_spec("sglang_ready", name="caught")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "specpilot", "up", str(tmp_path / "caught.toml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        wait_for(Path(os.environ["SPECPILOT_HOME"]) / "runs" / "caught" / "pid", process)
        process.send_signal(sig)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, out + err
    assert "interrupted: caught is stopped" in err
    state = read_state("caught")
    assert state.phase != "ready"
    assert holding(state.run_token or "") == []
    assert state.pgid == 0 or process_group_members(state.pgid) == []


def test_a_signal_under_json_is_one_json_object(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """`up --json` ended by a signal: stdout held nothing (the stop was said on stderr only)."""
    make_spec("sglang_ready", name="caught")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "specpilot", "up", str(tmp_path / "caught.toml"), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        wait_for(Path(os.environ["SPECPILOT_HOME"]) / "runs" / "caught" / "pid", process)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, out + err
    shown = json.loads(out)
    assert set(shown) == {"error", "fix", "exit"} and shown["exit"] == 130, shown
    assert shown["error"] == "interrupted: caught is stopped" and "same command" in shown["fix"], shown
    assert "interrupted: caught is stopped" in err
