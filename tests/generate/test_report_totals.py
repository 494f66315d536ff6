"""A finished job's report shows what the job did (totals and whole-job rates), not last-minute zeros."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from specpilot.cli import cli
from specpilot.generate.ledger.report import open_for_report, render_summary, summarize
from tests.fakeengines.standin import StandIn
from tests.generate.conftest import prompt_rows, write_jsonl

HOUR_S = 3600.0


def _finished_job(tmp_path: Path) -> Path:
    server = StandIn().start()
    out = tmp_path / "out"
    try:
        result = CliRunner().invoke(
            cli,
            ["generate", "--input", str(write_jsonl(tmp_path / "in.jsonl", prompt_rows(20))), "--output",
             str(out), "--server", server.url, "--max-tokens", "32", "--json"],
        )  # fmt: skip
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    (out / "generate.json").write_text(result.stdout)
    return out


def test_finished_job_reports_totals_an_hour_later(tmp_path: Path) -> None:
    out = _finished_job(tmp_path)
    ledger = open_for_report(out)
    try:
        later = summarize(ledger, now=time.time() + HOUR_S)
        meta = ledger.meta()
    finally:
        ledger.close()
    assert later.state == "finished" and later.done == 20
    # the rate the job ended at, whenever it is asked (once: 0.0 an hour later, and another
    # figure than `generate --json` printed as it ended)
    ended = json.loads((out / "generate.json").read_text())
    assert later.rows_per_s == ended["rows_per_s"] > 0
    assert later.elapsed_s is not None and 0 < later.elapsed_s < HOUR_S
    assert later.rows_per_s_overall is not None and later.output_tokens_per_s_overall is not None
    # rows over the job's time (both rounded to 3 decimals in the JSON: compare within 5%)
    assert abs(later.rows_per_s_overall * later.elapsed_s - 20) < 1.0
    assert later.output_tokens_per_s_overall > 0
    assert float(meta["initialized_at"]) <= time.time()

    shown = io.StringIO()
    render_summary(later, Console(file=shown, width=100))
    text = shown.getvalue()
    assert "rows/s (whole job)" in text and "out tok/s (whole job)" in text
    assert "last minute" not in text


def test_report_json_has_the_totals(tmp_path: Path) -> None:
    out = _finished_job(tmp_path)
    report = CliRunner().invoke(cli, ["report", str(out), "--json"])
    assert report.exit_code == 0
    summary = json.loads(report.stdout)
    assert summary["rows_per_s_overall"] > 0 and summary["elapsed_s"] > 0
