"""However the job stops (a failed stage, SIGTERM/SIGINT/SIGHUP at any stage), no engine it
started is left running unless keep_servers; one job command per job folder; a rerun with
--stop-servers stops what an earlier run kept. The stand-in appends each start's pid to a file,
so a test sees every engine the job ever started, its pid recorded or not."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specpilot.launch.state import start_lock
from tests.fixtures.engines import wait_exec
from tests.job.conftest import JobFactory, output_ids
from tests.job.test_job_bad_input import started
from tests.job.test_job_kill import ROOT, alive, run, start_job, wait_for

#: a bound on the job's own stop after a signal (not a timing: the stop waits for ports to close)
STOP_S = 120.0


def busy_job(make_job: JobFactory, tmp_path: Path) -> Path:
    """A job whose engine stays in `up` (not ready for 30 s) while tmp_path/busy exists."""
    (tmp_path / "busy").touch()
    return make_job(
        standin={"starts_file": str(tmp_path / "starts.txt"), "busy_file": str(tmp_path / "busy")}
    )


def stopped_by(process: subprocess.Popen[bytes], signum: int, job: Path) -> str:
    process.send_signal(signum)
    process.wait(timeout=STOP_S)
    return (job.parent / "job.out").read_text(errors="replace")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_during_up_leaves_no_engine(
    make_job: JobFactory, run_home: Path, tmp_path: Path, signum: int
) -> None:
    job = busy_job(make_job, tmp_path)
    process = start_job(job)
    wait_for("the engine's start", lambda: bool(started(tmp_path)), process, job)
    printed = stopped_by(process, signum, job)
    assert process.returncode == 130, printed
    assert "jobsrv stopped" in printed and "interrupted" in printed, printed
    assert [pid for pid in started(tmp_path) if alive(pid)] == []
    # and the same command resumes: it starts the engine again and finishes
    (tmp_path / "busy").unlink()
    again = run("job", str(job))
    assert again.exit_code == 0, again.output
    assert [pid for pid in started(tmp_path) if alive(pid)] == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_generate_ends_the_job_as_a_signal_does(
    make_job: JobFactory, run_home: Path, tmp_path: Path, signum: int
) -> None:
    """generate lets the rows in flight finish, then the job stops its engine and exits 130
    (it exited 1, as a failed stage, where a signal at any other stage exits 130)."""
    job = make_job(
        rows=200,
        standin={"starts_file": str(tmp_path / "starts.txt"), "faults": {"latency_s": 0.05}},
        job={"concurrency": 2},
    )
    process = start_job(job)
    wait_for("generate", lambda: len(output_ids(job.parent / "out")) >= 4, process, job)
    printed = stopped_by(process, signum, job)
    assert process.returncode == 130, printed
    assert f"interrupted by {signal.Signals(signum).name}" in printed and "jobsrv stopped" in printed, printed
    assert [pid for pid in started(tmp_path) if alive(pid)] == []


#: the job command, with a SIGTERM to itself as it begins to read the prompts (minutes for
#: millions of rows): the signal lands there, wherever the read is
SIGNALLED_IN_PREPARE = """
import os, signal, sys
import specpilot.job.prompts as prompts
read = prompts.check_prompts
prompts.check_prompts = lambda path: (os.kill(os.getpid(), signal.SIGTERM), read(path))[1]
from specpilot.cli import cli
cli(sys.argv[1:])
"""


def test_a_signal_while_the_prompts_are_read_ends_the_job_as_a_signal_does(
    make_job: JobFactory, run_home: Path, tmp_path: Path
) -> None:
    """Before any stage: nothing started, exit 130 and, under --json, one object (it died of
    the signal, exit -15, saying nothing)."""
    job = make_job(standin={"starts_file": str(tmp_path / "starts.txt")})
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    argv = [sys.executable, "-c", SIGNALLED_IN_PREPARE, "job", str(job), "--json"]
    ended = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=STOP_S)
    assert ended.returncode == 130, ended.stderr
    said = json.loads(ended.stdout)
    assert said["exit"] == 130 and "interrupted before the job started anything" in said["error"], said
    assert "same command" in said["fix"], said  # it was null
    assert started(tmp_path) == []


def test_a_second_job_command_on_the_folder_is_refused_naming_the_holder(
    make_job: JobFactory, run_home: Path, tmp_path: Path
) -> None:
    job = busy_job(make_job, tmp_path)
    process = start_job(job)
    try:
        wait_for("the engine's start", lambda: bool(started(tmp_path)), process, job)
        second = run("job", str(job))
        assert second.exit_code == 2, second.output
        [line] = [line for line in second.output.splitlines() if line.strip()]
        assert f"another `specpilot job` (pid {process.pid}, started at " in line, line
        assert "[job] output" in line
        assert len(started(tmp_path)) == 1  # the second started nothing
    finally:
        stopped_by(process, signal.SIGTERM, job)
    assert [pid for pid in started(tmp_path) if alive(pid)] == []


def test_a_stage_failing_after_up_stops_the_engine(
    make_job: JobFactory, run_home: Path, tmp_path: Path
) -> None:
    """Every answer cut off: export has no clean row and fails; the server was left running."""
    job = make_job(
        rows=4,
        standin={
            "starts_file": str(tmp_path / "starts.txt"),
            "faults": {"latency_s": 0.01, "cut_marker": "question"},
        },
    )
    result = run("job", str(job))
    assert result.exit_code == 1, result.output
    assert "export" in result.output and "jobsrv stopped" in result.output, result.output
    assert started(tmp_path) and [pid for pid in started(tmp_path) if alive(pid)] == []


def test_a_full_disk_while_the_job_generates_fails_the_stage(
    make_job: JobFactory, run_home: Path, tmp_path: Path
) -> None:
    """The README's table: exit 1 "a stage failed (the same command resumes)"; a full disk is
    no bad input, where it exited 2. Writes fail with ENOSPC (the part is /dev/full)."""
    job = make_job(rows=3, standin={"starts_file": str(tmp_path / "starts.txt")})
    part = job.parent / "out" / "data" / "part-00000.jsonl"
    part.parent.mkdir(parents=True)
    part.symlink_to("/dev/full")
    result = run("job", str(job), "--json")
    assert result.exit_code == 1, result.output
    said = json.loads(result.stdout)
    assert said["error"] == f"[job] output: the disk holding {job.parent / 'out'} is full", said
    assert said["fix"].startswith("free space, then run the same command again"), said
    assert started(tmp_path) and [pid for pid in started(tmp_path) if alive(pid)] == []


def test_stop_servers_stops_what_an_earlier_run_kept(
    make_job: JobFactory, run_home: Path, tmp_path: Path
) -> None:
    job = make_job(rows=3, standin={"starts_file": str(tmp_path / "starts.txt")}, job={"keep_servers": True})
    assert run("job", str(job)).exit_code == 0
    [engine] = started(tmp_path)
    assert alive(engine)  # kept, as asked
    again = run("job", str(job), "--stop-servers", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["stages"]["down"]["status"] == "done"
    assert not alive(engine)


def test_the_down_stage_signals_no_process_a_forged_record_names_and_says_so(
    make_job: JobFactory, run_home: Path, tmp_path: Path
) -> None:
    """A kept server stopped by hand, its record then forged onto someone's process (pid and
    start time): the rerun's down stage signalled nothing, as it must, and said 'stopped'."""
    from specpilot.launch.state import write_state
    from tests.launch.test_stop_identity import engine_state, start_ticks

    job = make_job(rows=3, job={"keep_servers": True})
    assert run("job", str(job)).exit_code == 0
    assert run("down", "jobsrv").exit_code == 0
    foreign = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        wait_exec(foreign.pid)
        run_dir = tmp_path / "state" / "runs" / "jobsrv"
        forged = engine_state("jobsrv", foreign.pid, run_dir, start_ticks(foreign.pid))
        write_state(dataclasses.replace(forged, started_at_s=time.time()))  # as if a restart's
        again = run("job", str(job), "--stop-servers", "--json")
        assert foreign.poll() is None  # never signalled
    finally:
        foreign.kill()
        foreign.wait()
    assert f"down: jobsrv: pid {foreign.pid} is left (unproven" in again.stderr, again.stderr
    assert "down: jobsrv stopped" not in again.stderr
    down = json.loads(again.stdout)["stages"]["down"]["evidence"]
    assert down["stopped"] is None and down["result"]["signalled"] == []


def test_a_down_stage_finding_its_server_already_stopped_says_so(
    make_job: JobFactory, run_home: Path
) -> None:
    """A signal during export: the job's stop stopped the server, down was left to do; the rerun
    said "down: jobsrv stopped" of a server it found not running."""
    job = make_job(rows=3)
    assert run("job", str(job)).exit_code == 0
    record = job.parent / "out" / "job.json"
    data = json.loads(record.read_text())
    data["stages"]["down"]["status"] = "running"
    record.write_text(json.dumps(data))
    again = run("job", str(job))
    assert again.exit_code == 0, again.output
    assert "down: jobsrv was not running" in again.output and "jobsrv stopped" not in again.output


def test_a_job_does_not_start_its_server_while_an_up_of_it_is_under_way(
    make_job: JobFactory, run_home: Path, tmp_path: Path
) -> None:
    """The job's up stage takes the start lock `up` holds from its preflight on: with an `up` of
    the same name under way (before it wrote any run record), the job refuses, naming it, and
    starts nothing (before, both started the engine on one port)."""
    job = busy_job(make_job, tmp_path)
    with start_lock("jobsrv"):  # as `specpilot up jobsrv.toml` holds it while it plans and ships
        result = run("job", str(job))
    assert result.exit_code == 2, result.output
    assert (
        f"is being started by another `specpilot up` or `specpilot job` (pid {os.getpid()})" in result.output
    )
    assert started(tmp_path) == []
    (tmp_path / "busy").unlink()
    again = run("job", str(job))  # the same command, once that start is over
    assert again.exit_code == 0, again.output
    assert [pid for pid in started(tmp_path) if alive(pid)] == []
