"""A signal that lands while the job's event loop is mid-step ends the job in order: exit 130,
its engine stopped, and nothing printed after its one error line. The signal is sent by the
job process to itself from inside the step, so it lands there every run. Before, SIGHUP in a
request's task raised KeyboardInterrupt there: the task kept it unretrieved ("Task exception
was never retrieved", its traceback and aiohttp's "coroutine ... was never awaited" followed
the error line, about one run in three); SIGTERM just after generate sent its last request
(generate's loop had handed it back to the default) killed the job, its engine left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.job.conftest import JobFactory
from tests.job.test_job_bad_input import started
from tests.job.test_job_kill import ROOT, alive
from tests.job.test_job_stops import STOP_S

#: the job command, sending signal argv[2] to itself in a step of its loop: "request" in the
#: 5th request's task (generate in full swing), "after" in the job's own task as generate
#: writes its reports (every request answered)
SIGNALLED_IN_LOOP = """
import os, sys
where, signum = sys.argv.pop(1), int(sys.argv.pop(1))
if where == "request":
    from specpilot.generate.dispatch.client import ChatClient
    complete, sent = ChatClient.complete, []
    async def signalled(self, *args, **kwargs):
        sent.append(1)
        if len(sent) == 5:
            os.kill(os.getpid(), signum)
        return await complete(self, *args, **kwargs)
    ChatClient.complete = signalled
else:
    from specpilot.generate.job import Job
    write_reports = Job.write_reports
    def signalled(self):
        os.kill(os.getpid(), signum)
        return write_reports(self)
    Job.write_reports = signalled
from specpilot.cli import cli
cli(sys.argv[1:])
"""

#: what an exception left in a task, or a coroutine dropped unawaited, prints
LEFTOVERS = ("Traceback", "never retrieved", "never awaited")


@pytest.mark.parametrize("where", ["request", "after"])
@pytest.mark.parametrize(
    "signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT], ids=["SIGHUP", "SIGTERM", "SIGINT"]
)
def test_a_signal_mid_step_ends_the_job_with_one_line_and_nothing_after(
    make_job: JobFactory, run_home: Path, tmp_path: Path, where: str, signum: int
) -> None:
    job = make_job(
        rows=40,
        standin={"starts_file": str(tmp_path / "starts.txt"), "faults": {"latency_s": 0.05}},
        job={"concurrency": 2},
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    argv = [sys.executable, "-c", SIGNALLED_IN_LOOP, where, str(signum), "job", str(job)]
    ended = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=STOP_S)
    said = ended.stderr
    assert ended.returncode == 130, said
    assert [word for word in LEFTOVERS if word in said] == [], said
    errors = [line for line in said.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "interrupted" in errors[0], said
    if where == "request":  # generate lets the requests in flight finish, as for Ctrl-C
        assert f"generate: interrupted by {signal.Signals(signum).name}" in errors[0], said
    assert "jobsrv stopped" in said, said
    assert started(tmp_path) and [pid for pid in started(tmp_path) if alive(pid)] == []
