"""`kill -9` of the job command, then the same command: it finishes, every row exactly once,
and never two servers of the job at once (a live run it recorded is reused; a start it
interrupted is stopped before the next one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.job.conftest import JobFactory, output_ids

ROOT = Path(__file__).resolve().parents[2]
#: the longest the job may take to reach the point a test kills it at (a bound, not a timing)
REACH_S = 60.0


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def start_job(job: Path) -> subprocess.Popen[bytes]:
    """The job command in its own process; what it prints goes to job.parent/job.out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    with (job.parent / "job.out").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "specpilot", "job", str(job)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_for(what: str, ready: Callable[[], bool], process: subprocess.Popen[bytes], job: Path) -> None:
    """Until `ready`; a job that ended first fails the test at once with what it printed
    (it waited out REACH_S silently before, which hid why the job never got there)."""
    deadline = time.monotonic() + REACH_S
    while not ready():
        ended = process.poll() is not None
        if ended or time.monotonic() >= deadline:
            printed = (job.parent / "job.out").read_text(errors="replace")
            why = f"ended (exit {process.returncode})" if ended else f"was still running after {REACH_S:g} s"
            pytest.fail(f"the job {why} before it reached {what}; it printed:\n{printed}")
        time.sleep(0.05)


def state(run_home: Path) -> dict:  # type: ignore[type-arg]
    path = run_home.parent / "state" / "runs" / "jobsrv" / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def test_kill_during_generate_reuses_the_recorded_server(make_job: JobFactory, run_home: Path) -> None:
    # 200 rows at 2 x 20 per second: seconds between the 10th row and the last, for the kill
    job = make_job(rows=200, standin={"faults": {"latency_s": 0.05}}, job={"concurrency": 2})
    out = job.parent / "out"
    process = start_job(job)
    wait_for("generate", lambda: len(output_ids(out)) >= 10, process, job)
    process.send_signal(signal.SIGKILL)
    process.wait()
    engine = state(run_home)["pid"]
    assert alive(engine)  # the job's server outlived the job command
    again = run("job", str(job))
    assert again.exit_code == 0, again.output
    assert "reusing it" in again.output
    data = json.loads((out / "job.json").read_text())
    assert data["stages"]["up"]["evidence"]["pid"] == engine and data["stages"]["up"]["attempts"] == 1
    assert sorted(output_ids(out)) == sorted(f"q{i}" for i in range(200))
    assert not alive(engine)  # down at the end


def test_kill_during_up_stops_the_interrupted_start_first(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(rows=10)
    process = start_job(job)
    # the state is written before the spawn (pid 0) and again with the engine's pid
    wait_for("up", lambda: bool(state(run_home).get("pid")), process, job)
    process.send_signal(signal.SIGKILL)
    process.wait()
    first = state(run_home)["pid"]
    again = run("job", str(job))
    assert again.exit_code == 0, again.output
    assert not alive(first)
    data = json.loads((job.parent / "out" / "job.json").read_text())
    assert data["stages"]["up"]["evidence"]["pid"] != first
    assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(10))


@pytest.mark.parametrize("stage", ["check", "plan", "up", "generate", "export", "down"])
def test_a_job_left_at_any_stage_finishes(make_job: JobFactory, run_home: Path, stage: str) -> None:
    """job.json as a kill at `stage` leaves it (that stage running, the later ones pending)."""
    job = make_job(rows=12)
    assert run("job", str(job)).exit_code == 0
    path = job.parent / "out" / "job.json"
    data = json.loads(path.read_text())
    names = list(data["stages"])
    for later in names[names.index(stage) :]:
        if data["stages"][later]["status"] != "skipped":
            data["stages"][later]["status"] = "pending" if later != stage else "running"
    path.write_text(json.dumps(data))
    again = run("job", str(job), "--json")
    assert again.exit_code == 0, again.output
    assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(12))
    assert not alive(state(run_home)["pid"])
    finished = json.loads(path.read_text())["stages"]
    assert all(finished[s]["status"] in ("done", "skipped") for s in names)


def test_an_attempt_a_kill_ended_counts_to_its_last_heartbeat(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(rows=6)
    assert run("job", str(job)).exit_code == 0
    path = job.parent / "out" / "job.json"
    data = json.loads(path.read_text())
    generate = data["stages"]["generate"]
    # as a kill leaves it: running, its last heartbeat an hour after it began, on 1 GPU
    generate.update(status="running", seen_at=generate["started_at"] + 3600.0, gpus=1)
    for later in ("export", "down"):
        data["stages"][later]["status"] = "pending"
    path.write_text(json.dumps(data))
    assert run("job", str(job)).exit_code == 0
    counted = json.loads(path.read_text())["stages"]["generate"]
    assert counted["interrupted_s"] == 3600.0
    assert counted["gpu_hours"] >= generate["gpu_hours"] + 1.0
