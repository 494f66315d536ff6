"""A server that answers every request "slow down" (429/503) ends the job at --give-up-after-s.

Once, such a server never ended the job, whatever --give-up-after-s said: every row backed off
for free (a Retry-After of a day was waited 60 s a time, twenty times a row), and a 503 storm
ended, when it ended, with "no server has answered ... check the addresses" although the
server had answered every request. The job runs as a real process with a bounded wait, so a
regression fails the test instead of hanging it.
"""

from __future__ import annotations

import email.utils
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specpilot.generate.dispatch.client import RETRY_AFTER_CAP_S, RETRY_AFTER_DEFAULT_S, retry_after_s
from tests.fakeengines.standin import Faults, StandIn
from tests.generate.conftest import prompt_rows, write_jsonl

JOB_WAIT_S = 60
NOW_S = 1_700_000_000.0


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        (" 2.5 ", 2.5),
        ("86400", RETRY_AFTER_CAP_S),  # a day: asked again after the cap
        (email.utils.formatdate(NOW_S + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW_S + 86400, usegmt=True), RETRY_AFTER_CAP_S),
        (email.utils.formatdate(NOW_S - 600, usegmt=True), 0.0),  # a date gone by: now
        ("-5", RETRY_AFTER_DEFAULT_S),
        ("soon", RETRY_AFTER_DEFAULT_S),
        ("inf", RETRY_AFTER_DEFAULT_S),
        ("nan", RETRY_AFTER_DEFAULT_S),
        ("", RETRY_AFTER_DEFAULT_S),
    ],
)
def test_retry_after_is_seconds_or_a_date_capped_and_a_bogus_one_waits_the_default(
    header: str, seconds: float
) -> None:
    assert retry_after_s(header, NOW_S) == pytest.approx(seconds, abs=1.0)


def test_no_retry_after_is_no_wait_of_the_servers_own() -> None:
    assert retry_after_s(None, NOW_S) is None


def _generate_giving_up_at_2_s(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    inputs = write_jsonl(tmp_path / "in.jsonl", prompt_rows(4))
    argv = [sys.executable, "-m", "specpilot", "generate", "--input", str(inputs),
            "--output", str(tmp_path / "out"), "--server", url, "--model", "fake-model",
            "--give-up-after-s", "2", "--progress-interval-s", "0"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=JOB_WAIT_S, env=env)


@pytest.mark.timeout(JOB_WAIT_S + 10)
@pytest.mark.parametrize("retry_after", ["1", "86400", "Wed, 21 Oct 2099 07:28:00 GMT", "-3", "bogus"])
def test_a_server_answering_every_request_429_ends_the_job_at_give_up(
    tmp_path: Path, retry_after: str
) -> None:
    with StandIn(Faults(burst_429_every=1, burst_429_length=1 << 30, retry_after=retry_after)) as server:
        done = _generate_giving_up_at_2_s(tmp_path, server.url)
        assert server.counts.answered == 0 and server.counts.rate_limited > 0
    assert done.returncode == 1, done.stderr
    assert "every request answered 429 Too Many Requests for 2 s (--give-up-after-s)" in done.stderr
    assert "check the" not in done.stderr  # the server answered: no address to check
    assert "(the rows left are kept)" in done.stderr
    assert not (tmp_path / "out" / "errors.jsonl").read_text()  # no row spent on the 429s


@pytest.mark.timeout(JOB_WAIT_S + 10)
def test_a_503_storm_that_never_ends_names_the_503s_not_the_addresses(tmp_path: Path) -> None:
    with StandIn(Faults(storm_503=1 << 30)) as server:
        done = _generate_giving_up_at_2_s(tmp_path, server.url)
    assert done.returncode == 1, done.stderr
    assert "every request answered 503 Service Unavailable for 2 s (--give-up-after-s)" in done.stderr
    assert "no server has answered" not in done.stderr


@pytest.mark.timeout(JOB_WAIT_S + 10)
def test_rows_a_server_answers_429_go_to_another_server_at_once(tmp_path: Path) -> None:
    """Once, a row answered 429 waited out the Retry-After (capped at 60 s) and went back to the
    same server (the fewest in flight: it answers at once), again and again, while the other
    server sat idle: minutes for 8 rows. Now a server that says "slow down" is sent nothing for
    its Retry-After, and its rows go where there is room now."""
    inputs = write_jsonl(tmp_path / "in.jsonl", prompt_rows(8))
    every = Faults(burst_429_every=1, burst_429_length=1 << 30, retry_after="86400")
    with StandIn(every) as limiting, StandIn(Faults()) as serving:
        argv = [sys.executable, "-m", "specpilot", "generate", "--input", str(inputs),
                "--output", str(tmp_path / "out"), "--server", limiting.url, "--server", serving.url,
                "--model", "fake-model", "--progress-interval-s", "0"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=JOB_WAIT_S, env=env)
        assert done.returncode == 0, done.stderr
        assert serving.counts.answered == 8 and limiting.counts.answered == 0
        assert limiting.counts.rate_limited <= 8  # no row was sent back to it
