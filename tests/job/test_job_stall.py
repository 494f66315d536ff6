"""An engine that stays alive while its requests block (a hung collective, a deadlocked
scheduler) is a stall: no token progress with requests in flight past the stall bound.

Once, the job waited out the 1,800 s request timeout for each such request, the healer
watching deaths only. Now the job restarts the stalled engine (the verified stop, then a
start) and every row is done exactly once, none charged an attempt for the stall.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from tests.job.conftest import JobFactory, output_ids


@pytest.mark.timeout(120)
def test_a_stalled_engine_is_restarted_and_its_rows_are_done_once_without_spending_attempts(
    make_job: JobFactory, run_home: Path
) -> None:
    once = run_home.parent / "stalled-once"
    job = make_job(
        rows=30,
        standin={"stall_after_answers": 6, "stall_once_file": str(once)},
        job={"stall_after_s": 2.0, "concurrency": 4},
    )
    result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert once.exists()  # it did stall
    out = job.parent / "out"
    assert sorted(output_ids(out)) == sorted(f"q{i}" for i in range(30))  # every row exactly once
    restarts = json.loads((out / "job.json").read_text())["restarts"]
    assert [(r["cause"], r["outcome"]) for r in restarts] == [("stall", "ready")]
    assert "no token progress for" in restarts[0]["line"]
    assert "jobsrv stalled: no token progress" in result.output
    # the bound as the job file gives it: the job has no --stall-after-s
    assert "(stall bound 2 s: [job] stall_after_s)" in result.output
    assert "--stall-after-s" not in result.output
    with sqlite3.connect(out / "ledger.sqlite") as db:
        attempts = {n for (n,) in db.execute("SELECT attempts FROM rows")}
    assert attempts == {1}  # the rows the stall held were sent again for free


@pytest.mark.timeout(120)
def test_generate_alone_takes_a_stalled_server_out_says_why_and_keeps_the_rows(tmp_path: Path) -> None:
    from tests.fakeengines.standin import Config, StandIn
    from tests.generate.conftest import prompt_rows, write_jsonl

    config = Config(answers="echo", served_name="m", stall_after_answers=3)
    inputs = write_jsonl(tmp_path / "in.jsonl", prompt_rows(12))
    with StandIn(config=config) as server:
        result = CliRunner().invoke(
            cli,
            ["generate", "--input", str(inputs), "--output", str(tmp_path / "out"), "--server", server.url,
             "--model", "m", "--concurrency", "2", "--stall-after-s", "1", "--progress-interval-s", "0"],
            catch_exceptions=False,
        )  # fmt: skip
    assert result.exit_code == 1, result.output
    name = server.url.split("://")[1]
    assert f"server {name} stalled: no token progress for" in result.output
    assert "(stall bound 1 s: --stall-after-s)" in result.output
    assert "the rows left are kept" in result.output
    with sqlite3.connect(tmp_path / "out" / "ledger.sqlite") as db:
        states = dict(db.execute("SELECT state, COUNT(*) FROM rows GROUP BY state"))
        spent = {n for (n,) in db.execute("SELECT attempts FROM rows WHERE state != 2")}
    assert states.get(2) == 3 and states.get(3) is None  # 3 done, none failed: the rest pending
    assert spent == {0}  # no attempt spent on the stall
