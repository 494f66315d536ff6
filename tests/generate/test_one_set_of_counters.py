"""One set of counters: the page, `/metrics`, `report` and the progress line show in flight,
retries, failed and the token rates from the same source (the ledger's summary), and the rates
are over a stated window of fixed length, which rows finishing in waves cannot inflate."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from specpilot.cli import cli
from specpilot.generate.dispatch.servers import ServerPool
from specpilot.generate.dispatch.stats import progress_numbers
from specpilot.generate.ledger import report
from specpilot.generate.ledger.report import RATE_WINDOW_S, summarize
from specpilot.generate.ledger.store import DoneRecord, Ledger, LedgerBatch
from specpilot.status.ledger_view import read_snapshot
from specpilot.status.metrics import exposition
from specpilot.status.page import PageInput, render_page
from tests.fakeengines.standin import Faults, StandIn
from tests.generate.conftest import prompt_rows, write_jsonl

ROWS = 120
CONCURRENCY = 2
KILL_AFTER_DONE = 30


def four_views(out: Path, server: str) -> dict[str, dict[str, float]]:
    """in flight, retries, failed and output tok/s as each of the four views shows them."""
    reported = json.loads(CliRunner().invoke(cli, ["report", str(out), "--json"]).stdout)
    snapshot = read_snapshot(out)
    page = render_page(PageInput("job", snapshot, None))

    def cell(key: str) -> float:
        found = re.search(rf'id="{key}">([^<]*)<', page)
        assert found is not None, key
        return float(found.group(1))

    metrics = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition(snapshot, None).decode())
        for sample in family.samples
    }
    line = progress_numbers(summarize(Ledger.in_dir(out, readonly=True)), None, ServerPool([server], 1))
    window = f"{reported['rate_window_s']:.0f} s"
    return {
        "report": {
            "in_flight": reported["in_flight"],
            "retries": reported["retries"],
            "failed": reported["failed"],
            "tok/s": round(reported["output_tokens_per_s"]),
        },
        "page": {
            "in_flight": cell("rows-in-flight"),
            "retries": cell("retries"),
            "failed": cell("rows-failed"),
            "tok/s": cell("tokens-per-s"),
        },
        "metrics": {
            "in_flight": metrics[("specpilot_rows", (("state", "in_flight"),))],
            "retries": metrics[("specpilot_requests_resent_total", ())],
            "failed": metrics[("specpilot_rows", (("state", "failed"),))],
            "tok/s": round(metrics[("specpilot_output_tokens_per_second", ())]),
        },
        "progress line": {
            "in_flight": float(line["in flight"]),
            "retries": float(line["retries"]),
            "failed": float(line["failed"]),
            "tok/s": float(line[f"out tok/s ({window})"]),
        },
    }


def frozen(monkeypatch: pytest.MonkeyPatch, read: Callable[[], dict[str, float]]) -> dict[str, float]:
    """`read` with the summary's clock stopped: the four views are read at one moment."""
    now_s = time.time()
    with monkeypatch.context() as patch:
        patch.setattr(report.time, "time", lambda: now_s)
        return read()


def assert_agree(views: dict[str, dict[str, float]]) -> dict[str, float]:
    first = views["report"]
    for name, numbers in views.items():
        assert numbers == pytest.approx(first), f"{name} says {numbers}, report says {first}"
    return first


def test_the_four_views_agree_through_retries_a_crash_and_the_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = prompt_rows(ROWS)
    rows[5] = {"id": "q5", "prompt": "TOO-LONG q5"}  # always refused: one failed row
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"
    server = StandIn(Faults(latency_s=0.02, error_500_rate=0.25)).start()
    argv = [sys.executable, "-m", "specpilot", "generate", "--input", str(path), "--output", str(out),
            "--server", server.url, "--model", "m", "--concurrency", str(CONCURRENCY),
            "--max-attempts", "12", "--flush-interval-s", "0.05", "--json"]  # fmt: skip
    # 12 attempts: at 25% 500s, 6 left 120 rows a 3% chance that a second row failed them all
    env = {**os.environ, "PYTHONPATH": str(Path(report.__file__).parents[3])}
    try:
        job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            deadline = time.monotonic() + 120
            while _done(out) < KILL_AFTER_DONE:
                assert job.poll() is None and time.monotonic() < deadline, "the job ended before the kill"
                time.sleep(0.02)
            job.send_signal(signal.SIGKILL)  # the crash: requests in flight, rows waiting to retry
        finally:
            job.wait()
        # nothing runs: what the ledger held as in flight waits for the next run, in every view
        crashed = frozen(monkeypatch, lambda: assert_agree(four_views(out, server.url)))
        assert crashed["in_flight"] == 0

        finished = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
        assert finished.returncode == 1, finished.stderr[-2000:]  # 1: a row failed
        summary = json.loads(finished.stdout)
        assert summary["state"] == "finished"
    finally:
        server.close()
    done = frozen(monkeypatch, lambda: assert_agree(four_views(out, server.url)))
    assert (done["in_flight"], done["failed"]) == (0, 1)
    # the rows cut off by the kill and the 500s were sent again, and counted as such everywhere
    assert done["retries"] > crashed["retries"] and done["retries"] == summary["retries"]
    assert server.counts.errors_500 > 0


def _done(out: Path) -> int:
    try:
        with sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT COUNT(*) FROM rows WHERE state = 2").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet, or its tables not yet
        return 0


def waves_ledger(
    directory: Path, *, started_s: float, wave_every_s: float, waves: int, **wave: int
) -> Ledger:
    """A stand-in engine's ledger: `rows` requests at a time, each `tokens` long and taking
    `wave_every_s`, so they finish together in waves; its true rate is rows x tokens / wave_every_s."""
    directory.mkdir()
    ledger = Ledger.in_dir(directory)
    count = wave["rows"] * waves
    ledger.initialize(((i, f"r{i}") for i in range(count)), dict)
    ledger.set_meta({"initialized_at": repr(started_s), "run_started_at": repr(started_s)})
    done = [
        DoneRecord(i, 0, 10, wave["tokens"], 0, started_s + wave_every_s * (1 + i // wave["rows"]))
        for i in range(count)
    ]
    ledger.apply(LedgerBatch([], [], [], done, []))
    return ledger


def test_rates_of_rows_finishing_in_waves_match_the_stand_in_s_rate(tmp_path: Path) -> None:
    rows, tokens, wave_every_s = 64, 256, 30.0
    true_tokens_per_s = rows * tokens / wave_every_s  # 546.1
    ledger = waves_ledger(
        tmp_path / "out", started_s=1000.0, wave_every_s=wave_every_s, waves=4, rows=rows, tokens=tokens
    )
    last_wave_s = 1000.0 + 4 * wave_every_s
    for now_s in (last_wave_s, last_wave_s + 10, last_wave_s + 25):
        summary = summarize(ledger, now=now_s, running=True)
        assert summary.rate_window_s == RATE_WINDOW_S
        # the two waves within the last minute, over the whole minute: exactly the stand-in's rate
        assert summary.output_tokens_per_s == pytest.approx(true_tokens_per_s, abs=0.1)
        assert summary.rows_per_s == pytest.approx(rows / wave_every_s, abs=0.001)
    # a run younger than the window: its rates are over its own age, stated as such
    young = summarize(ledger, now=1000.0 + 45, running=True)
    assert young.rate_window_s == 45.0
    assert young.output_tokens_per_s == pytest.approx(rows * tokens / 45, abs=0.1)  # one wave so far
    assert young.output_tokens_per_s <= true_tokens_per_s
    ledger.close()


@pytest.mark.parametrize(("stalled_s", "rows_in_window"), [(90.0, 0), (30.0, 64)])
def test_an_ended_job_s_rates_end_where_it_ended_not_at_its_last_row(
    tmp_path: Path, stalled_s: float, rows_in_window: int
) -> None:
    """A run that stalled before it ended: its final table showed the rows/s of the minute before
    the stall, and an ETA from it, as if they were current. Its window ends where the run did."""
    (tmp_path / "out").mkdir()
    ledger = Ledger.in_dir(tmp_path / "out")
    ledger.initialize(((i, f"r{i}") for i in range(64 * 5)), dict)  # a fifth wave never came
    ended_s = 1000.0 + 4 * 30.0 + stalled_s
    ledger.set_meta({"initialized_at": "1000.0", "run_started_at": "1000.0", "run_ended_at": repr(ended_s)})
    ledger.apply(
        LedgerBatch(
            [], [], [], [DoneRecord(i, 0, 10, 8, 0, 1000.0 + 30.0 * (1 + i // 64)) for i in range(256)], []
        )
    )
    for now_s in (ended_s, 9000.0):  # as it ended, and asked later
        summary = summarize(ledger, now=now_s, running=False)
        assert summary.rate_window_s == RATE_WINDOW_S
        assert summary.rows_per_s == pytest.approx(rows_in_window / RATE_WINDOW_S, abs=0.001)
        assert (summary.eta_s is None) == (rows_in_window == 0), summary  # no rate, no ETA
    ledger.close()


def test_a_dead_job_s_in_flight_rows_are_pending(tmp_path: Path) -> None:
    ledger = waves_ledger(tmp_path / "out", started_s=1000.0, wave_every_s=1.0, waves=1, rows=4, tokens=8)
    ledger.initialize(((i, f"r{i}") for i in range(6)), dict)
    ledger.apply(LedgerBatch([0, 1, 2], [], [], [], []))
    assert (summarize(ledger, running=True).in_flight, summarize(ledger, running=True).pending) == (3, 3)
    assert (summarize(ledger).in_flight, summarize(ledger).pending) == (0, 6)  # no job holds the folder
    ledger.close()


def test_a_row_waiting_to_be_retried_is_not_in_flight(tmp_path: Path) -> None:
    ledger = waves_ledger(tmp_path / "out", started_s=1000.0, wave_every_s=1.0, waves=1, rows=1, tokens=8)
    ledger.initialize(((i, f"r{i}") for i in range(3)), dict)
    ledger.apply(LedgerBatch([0, 1, 2], [("HTTP 500", 1)], [], [], [], waiting={1, 2}))
    ledger.apply(LedgerBatch([2], [], [], [], []))  # row 2 sent again
    summary = summarize(ledger, running=True)
    assert (summary.in_flight, summary.pending, summary.retries) == (2, 1, 1)
    ledger.close()
