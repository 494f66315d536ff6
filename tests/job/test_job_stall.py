"""An engine that stays alive while its requests block (a hung collective, a deadlocked
scheduler) is a stall: no token progress with requests in flight past the stall bound.

Once, the job waited out the 1,800 s request timeout for each such request, the healer
watching deaths only. Now the job restarts the stalled engine (the verified stop, then a
start) and every row is done exactly once, none charged an attempt for the stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from click.testing import CliRunner

from specpilot import interrupts
from specpilot.cli import cli
from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.hosts.errors import CommandFailed
from specpilot.job import heal
from specpilot.job.record import JobRecord
from specpilot.launch.server_plan import ServerPlan
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
    # the run's end is kept, after the stall: the final rates' window ends there, not at the
    # last row (the rows/s from before the stall, and an ETA from it, were shown as current)
    with sqlite3.connect(tmp_path / "out" / "ledger.sqlite") as db:
        (ended,) = db.execute("SELECT value FROM meta WHERE key = 'run_ended_at'").fetchone()
        (last_done,) = db.execute("SELECT MAX(done_at) FROM rows").fetchone()
    assert float(ended) > last_done


def test_a_restart_whose_start_a_signal_cut_ends_the_job_for_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or `timeout`) signals the job's whole process group: the host agent spawning the
    restarted engine died of it, and the job ended 'host agent (spawn) on local exited -15'
    instead of 'interrupted by SIGTERM'. A start that fails on its own is said as such."""

    async def nothing(*args: object) -> None:
        return None

    async def killed(*args: object) -> None:
        raise CommandFailed("host agent (spawn) on local exited -15: ", returncode=-15, stderr=b"")

    monkeypatch.setattr(heal, "clear_run", nothing)
    monkeypatch.setattr(heal, "wait_port_closed", nothing)
    monkeypatch.setattr(heal, "start", killed)
    server = cast(ServerPlan, SimpleNamespace(spec=SimpleNamespace(name="jobsrv")))
    healer = heal.ServerHealer(server, JobRecord(tmp_path / "job.json", {}), 3, lambda line: None)

    def restarted(stop_reason: str | None) -> tuple[bool, list[str]]:
        stops: list[str] = []
        dispatcher: Any = SimpleNamespace(stop_reason=stop_reason, stop_for=stops.append)
        started = asyncio.run(
            healer._start_again(cast(Dispatcher, dispatcher), "jobsrv", 1, {"cause": "stall"}, 0.0, None)
        )
        return started, stops

    # the job is stopping for the signal already: it ends for that reason, nothing raised over it
    assert restarted("interrupted by SIGTERM; run the same command again to resume") == (False, [])
    assert restarted(None) == (
        False,
        [
            "jobsrv did not start again (host agent (spawn) on local exited -15: ); see `specpilot logs jobsrv`"
        ],
    )


@pytest.mark.parametrize("cut_by", ["its start's helper killed", "the job's task cancelled"])
def test_a_stall_restart_a_signal_cut_is_recorded_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut_by: str
) -> None:
    """The restart was left out of job.json's restarts: the rerun said 'restart 1 of 3' again."""
    signalled = "interrupted by SIGTERM; run the same command again to resume"

    async def nothing(*args: object, **kwargs: object) -> None:
        return None

    async def stopped(*args: object, **kwargs: object) -> dict[str, str]:
        return {"phase": "stopped"}

    async def cut(*args: object) -> None:
        if cut_by == "its start's helper killed":
            raise CommandFailed("host agent (spawn) on local exited -15: ", returncode=-15, stderr=b"")
        raise asyncio.CancelledError

    server = cast(ServerPlan, SimpleNamespace(spec=SimpleNamespace(name="jobsrv")))

    async def restart_planned(*args: object) -> object:
        return SimpleNamespace(action="restart", server=server, bound=None, backoff_s=0.0, change=None)

    monkeypatch.setattr(heal, "next_start", restart_planned)
    monkeypatch.setattr(heal, "run_down", stopped)
    monkeypatch.setattr(heal, "clear_run", nothing)
    monkeypatch.setattr(heal, "wait_port_closed", nothing)
    monkeypatch.setattr(heal, "start", cut)
    record = JobRecord(tmp_path / "job.json", {})
    said: list[str] = []
    healer = heal.ServerHealer(server, record, 3, said.append)
    healer.stall = ("http://127.0.0.1:1", "no token progress for 2 s")
    dispatcher: Any = SimpleNamespace(stop_reason=signalled, stop_for=lambda why: None)
    interrupts.record(signal.SIGTERM)  # the signal the job ends for
    try:
        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(healer._restart(cast(Dispatcher, dispatcher), 1, None))
    finally:
        interrupts.forget()
    assert "restart 1 of 3" in said[0], said
    [entry] = json.loads((tmp_path / "job.json").read_text())["restarts"]
    assert (entry["cause"], entry["outcome"], entry["end"]) == ("stall", "interrupted", signalled), entry
    assert heal.ServerHealer(server, record, 3, said.append).restarts == 1  # the rerun's budget counts it
