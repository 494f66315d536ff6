"""Runs own their folders and their processes: every file of a local run lives under
SPECPILOT_HOME, and what a crashed engine leaves in its process group (a helper that
ignores SIGTERM, as vLLM's resource_tracker does) is named by `status` (read-only: it
signals nothing) and ended by `up` reusing the name and by `down`, which names any
survivor. Real processes throughout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.launch.state import read_state, write_state
from tests.fixtures.engines import process_group_members
from tests.launch.conftest import SpecFactory

NOBODY_UID = 65534


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def ignores_sigterm(pid: int, within_s: float = 30.0) -> None:
    """Until the helper ignores SIGTERM: the stand-in writes its pid once it is started, before
    the helper's Python has run its first line (a SIGTERM then would end it)."""
    deadline = time.monotonic() + within_s
    while True:
        ignored = Path(f"/proc/{pid}/status").read_text().split("SigIgn:")[1].split()[0]
        if int(ignored, 16) >> (signal.SIGTERM - 1) & 1:
            return
        assert time.monotonic() < deadline, f"pid {pid} never ignored SIGTERM"
        time.sleep(0.01)


def crashed_run(make_spec: SpecFactory, tmp_path: Path, name: str) -> tuple[Path, int, int]:
    """A ready run whose engine was then SIGKILLed alone: (spec file, engine pid, leftover pid)."""
    stubborn = tmp_path / f"{name}.stubborn"
    make_spec("sglang_ready", name=name, standin={"stubborn_child_file": str(stubborn)})
    spec_path = tmp_path / f"{name}.toml"
    started = run("up", str(spec_path), "--json")
    assert started.exit_code == 0, started.output
    pid = json.loads(started.stdout)["pid"]
    leftover = int(stubborn.read_text())
    ignores_sigterm(leftover)
    os.kill(pid, signal.SIGKILL)  # the engine alone, as an OOM killer would
    assert wait_gone(pid)
    assert alive(leftover) and os.getpgid(leftover) == pid  # it outlived the engine, in its group
    return spec_path, pid, leftover


@pytest.fixture
def cleanup() -> Iterator[list[int]]:
    """Groups to SIGKILL if a test fails midway."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        for member in process_group_members(pgid):
            with contextlib.suppress(ProcessLookupError):  # it ended (and was reaped) meanwhile
                os.kill(member, signal.SIGKILL)


def test_every_file_of_a_local_run_is_under_specpilot_home(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    make_spec("sglang_ready", name="owned")
    started = run("up", str(tmp_path / "owned.toml"), "--json")
    try:
        assert started.exit_code == 0, started.output
        folder = Path(os.environ["SPECPILOT_HOME"]) / "runs" / "owned"
        assert json.loads(started.stdout)["run_dir"] == str(folder)
        names = {path.name for path in folder.iterdir()}
        assert {"launch.sh", "env", "spec.toml", "plan.json", "manifest.json", "engine.log", "pid"} <= names
        assert "state.json" in names
        assert not (run_home / ".specpilot").exists()  # nothing under ~/.specpilot regardless
        assert read_state("owned").log_path == str(folder / "engine.log")
    finally:
        assert run("down", "owned").exit_code == 0


def test_status_names_what_a_crashed_engine_left_and_signals_nothing(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, cleanup: list[int]
) -> None:
    _, pid, leftover = crashed_run(make_spec, tmp_path, "crash-status")
    cleanup.append(pid)
    status = run("status", "crash-status", "--json")
    assert status.exit_code == 1
    found = json.loads(status.stdout)
    assert found["phase"] == "failed" and found["alive"] is False  # found crashed
    left = found["leftovers"]
    assert leftover in left and found["leftovers_unproven"] == []
    assert all(alive(pid) for pid in left)  # a read-only command: nothing signalled
    said = run("status", "crash-status").output
    assert f"the engine left pid {' '.join(map(str, left))} running: `specpilot down crash-status`" in said
    assert all(alive(pid) for pid in left)
    down = json.loads(run("down", "crash-status", "--json", "--timeout-s", "1").output)
    assert down["signalled"] == left and wait_gone(leftover) and process_group_members(pid) == []
    again = json.loads(run("status", "crash-status", "--json").output)
    assert again["leftovers"] == []


def test_up_reusing_the_name_ends_the_old_group_first(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, cleanup: list[int]
) -> None:
    spec_path, pid, leftover = crashed_run(make_spec, tmp_path, "crash-reuse")
    cleanup.append(pid)
    earlier_exit = read_state("crash-reuse").exit_path
    again = CliRunner().invoke(cli, ["up", str(spec_path), "--json"], catch_exceptions=False)
    try:
        assert again.exit_code == 0, again.output
        said = f"crash-reuse: ended what the earlier run left in process group {pid}: pid "
        assert again.stderr.startswith(said)
        assert leftover in map(int, again.stderr[len(said) :].split())
        assert not alive(leftover) and process_group_members(pid) == []
        new_pid = json.loads(again.stdout)["pid"]
        cleanup.append(new_pid)
        assert new_pid != pid
        # the earlier engine may still be a zombie its watcher reaps only now: that watcher's
        # record of it (-9) goes to the earlier start's file, never to this start's
        assert earlier_exit is not None and read_state("crash-reuse").exit_path != earlier_exit
    finally:  # the new run's helper ignores SIGTERM too: no use waiting `down`'s 30 s for it
        run("down", "crash-reuse", "--timeout-s", "1")


def test_down_ends_the_leftovers_and_names_them(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, cleanup: list[int]
) -> None:
    _, pid, leftover = crashed_run(make_spec, tmp_path, "crash-down")
    cleanup.append(pid)
    down = run("down", "crash-down", "--json", "--timeout-s", "1")
    assert down.exit_code == 0
    stopped = json.loads(down.stdout)
    # the helper ignored SIGTERM: SIGKILL ended it, and nobody survived
    assert (stopped["stopped"], stopped["survivors"]) == ("killed", [])
    assert leftover in stopped["signalled"]
    assert not alive(leftover) and process_group_members(pid) == []


def test_a_process_of_another_group_started_earlier_is_not_the_run_s(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """Identity, not the group id alone: a member that started before the recorded leader
    cannot be the run's (its group id was recycled), so it is left alone."""
    make_spec("sglang_ready", name="identity")
    started = run("up", str(tmp_path / "identity.toml"), "--json")
    assert started.exit_code == 0, started.output
    state = read_state("identity")
    assert state.start_ticks is not None
    # pretend the run started later than its own processes did
    write_state(replace(state, start_ticks=state.start_ticks + 10**9))
    assert json.loads(run("down", "identity", "--json").output)["stopped"] == "stale"
    write_state(state)
    assert json.loads(run("down", "identity", "--json").output)["stopped"] == "terminated"
    assert process_group_members(state.pgid) == []


def test_a_run_folder_of_another_user_is_refused(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    make_spec("sglang_ready", name="theirs")
    folder = Path(os.environ["SPECPILOT_HOME"]) / "runs" / "theirs"
    folder.mkdir(parents=True)
    os.chown(folder, NOBODY_UID, NOBODY_UID)
    refused = run("up", str(tmp_path / "theirs.toml"))
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines()[-1] == (
        f"error: name: run folder {folder} belongs to uid {NOBODY_UID}, not to you (uid 0) "
        "(give the spec another name, or set SPECPILOT_HOME to a folder of your own)"
    )
    assert list(folder.iterdir()) == []  # nothing written into it
