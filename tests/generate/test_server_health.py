"""A server's health from what its requests see, not only from refused connections.

Once, a server that reset every connection (but answered /health) among healthy ones
made 5-8 of 40 rows spend all their attempts on it and fail; a 503 storm (chat and
/health alike) failed every queued row within seconds instead of pausing the job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import FATAL_MARKER, Faults, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl


def _config(tmp_path: Path, servers: list[StandIn], rows: list[dict[str, Any]], **extra: Any) -> JobConfig:
    settings: dict[str, Any] = {
        "concurrency": 4,
        "max_attempts": 2,
        "retry_base_s": 0.0,
        "retry_cap_s": 0.01,
        "probe_cap_s": 0.2,
        "show_progress": False,
        "flush_interval_s": 0.05,
        **extra,
    }
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    return JobConfig(
        path, tmp_path / "out", [Endpoint(s.url) for s in servers], None, Sampling(False), **settings
    )


def test_a_server_that_resets_every_connection_is_taken_out_and_no_row_fails(tmp_path: Path) -> None:
    bad = StandIn(Faults(drop_rate=1.0)).start()  # accepts, answers /health, drops every chat
    good = StandIn().start()
    try:
        outcome = run_generate(_config(tmp_path, [bad, good], prompt_rows(40)))
    finally:
        bad.close()
        good.close()
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary.failed == 0 and len(read_output(tmp_path / "out")) == 40
    runs = {run.server: run for run in outcome.summary.this_run_servers or []}
    assert runs[bad.url.split("://")[1]].taken_out >= 1 and runs[bad.url.split("://")[1]].rows_done == 0
    assert bad.counts.dropped >= 1 and good.counts.answered == 40


def test_a_503_storm_pauses_the_job_and_it_finishes_after(tmp_path: Path) -> None:
    # chat and /health answer 503 for longer than 6 rows x 2 attempts would last
    server = StandIn(Faults(storm_503=16)).start()
    try:
        outcome = run_generate(_config(tmp_path, [server], prompt_rows(6)))
    finally:
        server.close()
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary.failed == 0 and len(read_output(tmp_path / "out")) == 6
    assert (outcome.summary.this_run_servers or [])[0].taken_out >= 1


def test_the_final_line_offers_retry_failed(tmp_path: Path, fake_server: StandIn) -> None:
    rows = prompt_rows(3)
    rows[1]["conversations"][0]["content"] += f" {FATAL_MARKER}"
    outcome = run_generate(_config(tmp_path, [fake_server], rows))
    assert outcome.exit_code == 1
    assert outcome.message.endswith("then run the same command with --retry-failed to send them again")
