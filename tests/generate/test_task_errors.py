"""A bug in a background task (metrics poll, server probe) ends the job at once, named.

The stand-in server answers for real; one internal function on the path its answers
take is made to raise once the job is under way. The job must end with `TaskFailed`
naming the task, keep every row it finished (committed once), and a rerun must finish
the rest with every row exactly once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import specpilot.generate.dispatch.dispatcher as dispatch
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.dispatch.servers import SpecTracker
from specpilot.generate.job import JobConfig
from specpilot.generate.ledger.store import LEDGER_FILE, RowState
from specpilot.generate.sampling import Sampling
from specpilot.taskgroup import TaskFailed
from tests.fakeengines.standin import Faults, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

ROWS = 2000
ANSWERS_BEFORE_THE_BUG = 30


def _done_in_ledger(out: Path) -> int:
    with sqlite3.connect(out / LEDGER_FILE) as db:
        (done,) = db.execute("SELECT COUNT(*) FROM rows WHERE state = ?", (int(RowState.DONE),)).fetchone()
    return int(done)


def _break_metrics(monkeypatch: pytest.MonkeyPatch, server: StandIn) -> None:
    """The server's /metrics answer reaches SpecTracker.observe: it raises mid-job."""
    original = SpecTracker.observe

    def observe(self: SpecTracker, *args: Any) -> None:
        if server.counts.answered >= ANSWERS_BEFORE_THE_BUG:
            raise RuntimeError("bug in the metrics path")
        original(self, *args)

    monkeypatch.setattr(SpecTracker, "observe", observe)


def _break_probe(monkeypatch: pytest.MonkeyPatch, server: StandIn) -> None:
    """A dropped connection makes the dispatcher probe the server: the probe raises mid-job."""
    original = dispatch.probe

    async def probe(*args: Any) -> bool:
        if server.counts.answered >= ANSWERS_BEFORE_THE_BUG:
            raise RuntimeError("bug in the probe path")
        return await original(*args)

    monkeypatch.setattr(dispatch, "probe", probe)


@pytest.mark.parametrize(
    ("break_it", "faults", "named"),
    [
        (_break_metrics, Faults(latency_s=0.005), "the metrics poll loop"),
        (_break_probe, Faults(latency_s=0.005, drop_rate=0.05), "the probe of server 127.0.0.1:"),
    ],
    ids=["metrics poll", "server probe"],
)
def test_a_background_task_bug_ends_the_job_and_keeps_finished_rows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    break_it: Callable[[pytest.MonkeyPatch, StandIn], None],
    faults: Faults,
    named: str,
) -> None:
    server = StandIn(faults).start()
    out = tmp_path / "out"
    config = JobConfig(
        write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS)),
        out,
        [Endpoint(server.url)],
        "m",
        Sampling(True),
        concurrency=4,
        show_progress=False,
        flush_interval_s=0.05,
        metrics_interval_s=0.02,
        retry_base_s=0.0,
    )
    try:
        with monkeypatch.context() as patch:
            break_it(patch, server)
            with pytest.raises(TaskFailed) as failed:
                run_generate(config)
        assert str(failed.value).startswith(named), failed.value
        assert str(failed.value).endswith("(specpilot bug, rerun with --debug for the traceback)")
        assert "\n" not in str(failed.value)
        kept = [row["id"] for row in read_output(out)]
        # every finished row committed, once; the job stopped instead of running on
        assert 0 < _done_in_ledger(out) == len(kept) == len(set(kept)) < ROWS
        outcome = run_generate(config)
    finally:
        server.close()
    assert (outcome.exit_code, outcome.message) == (0, f"all {ROWS} rows done")
    ids = [row["id"] for row in read_output(out)]
    assert sorted(ids) == sorted(f"q{i}" for i in range(ROWS))
    assert set(kept) <= set(ids)
