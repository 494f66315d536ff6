"""A job whose engine answers every request "slow down" ends at `[job] give_up_after_s`.

Once, the job had no such key: generate's give-up bound was its default hour, so an engine
answering every request 429 held the job for an hour, and the line that ended it named
generate's flags (--give-up-after-s, --concurrency), which a job does not take.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.launch.state import read_state
from tests.job.conftest import JobFactory

#: a burst of 429s longer than any test: every request is answered 429
EVERY_REQUEST = 1 << 30


@pytest.mark.timeout(120)
def test_an_engine_answering_every_request_429_ends_the_job_at_its_give_up_bound(
    make_job: JobFactory, run_home: Path
) -> None:
    faults = {"burst_429_every": 1, "burst_429_length": EVERY_REQUEST, "retry_after": "86400"}
    job = make_job(rows=6, standin={"faults": faults}, job={"give_up_after_s": 2})
    result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert "every request answered 429 Too Many Requests for 2 s ([job] give_up_after_s)" in result.output
    assert "with a lower [job] concurrency (the rows left are kept)" in result.output
    assert "--give-up-after-s" not in result.output and "--concurrency" not in result.output
    out = job.parent / "out"
    assert json.loads((out / "job.json").read_text())["job"]["give_up_after_s"] == 2.0
    with sqlite3.connect(out / "ledger.sqlite") as db:
        states = dict(db.execute("SELECT state, COUNT(*) FROM rows GROUP BY state"))
    assert states == {0: 6}  # every row pending, none failed on the 429s: a rerun sends them all
    assert not (out / "errors.jsonl").read_text()
    assert read_state("jobsrv").phase == "stopped"  # the job's server is not left running


@pytest.mark.parametrize("value", ["0", "-1", "inf", '"an hour"'])
def test_a_give_up_bound_that_is_not_a_positive_number_is_refused_naming_the_key(
    make_job: JobFactory, run_home: Path, value: str
) -> None:
    job = make_job(extra="")
    job.write_text(job.read_text().replace("[job.sampling]", f"give_up_after_s = {value}\n[job.sampling]"))
    result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: [job] give_up_after_s: must be")
    assert not (run_home.parent / "state" / "runs").exists()  # nothing started
