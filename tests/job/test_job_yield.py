"""`specpilot job` judges its own output: the yield guard stops a job whose answers are cut,
the rerun with a larger max_tokens and --retry-truncated completes it exactly once, a dataset
under its floor is never "done", and job.json keeps the yield and the GPU-hours wasted."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.generate.ledger.store import RowState
from specpilot.job.pipeline import _max_tokens, context_tokens
from specpilot.job.record import JobRecord
from specpilot.job.spec import load_job
from specpilot.launch.server_plan import ServerPlanRecord
from tests.job.conftest import JobFactory, output_ids

ROWS = 2000
CUT_AT = 64
FULL_BUDGET = 400  # the stand-in answers every prompt in full from this max_tokens on
CONTEXT = ["--context-length", "4096"]


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def record(job: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((job.parent / "out" / "job.json").read_text())
    return data


def run_phase(run_home: Path, name: str = "jobsrv") -> str:
    state = json.loads((run_home.parent / "state" / "runs" / name / "state.json").read_text())
    return str(state["phase"])


def sent_rows(out: Path) -> int:
    """Rows the job sent at least once (done, or out when it stopped)."""
    with sqlite3.connect(out / "ledger.sqlite") as db:
        ((sent,),) = db.execute(f"SELECT COUNT(*) FROM rows WHERE attempts > 0 OR state = {RowState.DONE}")
    return int(sent)


def _cut_job(make_job: JobFactory, share: float, **job: object) -> Path:
    return make_job(
        rows=ROWS,
        standin={"faults": {"cut_share": share, "cut_unless_max_tokens": FULL_BUDGET}},
        args=CONTEXT,
        sampling={"max_tokens": CUT_AT},
        job=job or None,
    )


def test_a_job_of_cut_answers_stops_itself_then_the_rerun_completes_it_once(
    make_job: JobFactory, run_home: Path
) -> None:
    job = _cut_job(make_job, 0.97, export=["specforge", "parquet"])
    out = job.parent / "out"
    stopped = run("job", str(job))
    assert stopped.exit_code == 1, stopped.output
    assert sent_rows(out) < 0.4 * ROWS  # stopped before 40% of the input was sent
    assert "yield guard:" in stopped.output and f"cut at max_tokens {CUT_AT}" in stopped.output
    assert f"p50 {CUT_AT}, p90 {CUT_AT}, p99 {CUT_AT}" in stopped.output  # the lengths measured
    assert "--max-tokens 4030 --retry-truncated" in stopped.output  # 4096 less the longest prompt
    assert run_phase(run_home) == "stopped"  # the engine it started is down
    data = record(job)
    assert data["stages"]["generate"]["status"] == "failed"
    assert data["stages"]["down"]["status"] == "done"  # job.json says the engine was stopped
    guard = data["yield_guard"]
    assert guard["stopped_early"] and guard["main_cause"] == "truncated" and guard["judged"] >= 200
    assert guard["lengths"]["max_tokens"] == CUT_AT and guard["lengths"]["censored"]
    assert data["yield"]["by_cause"]["truncated"] == guard["by_cause"]["truncated"]
    assert 0 < data["gpu_hours_wasted_share"] <= 1
    assert data["gpu_hours_wasted"]["parts"]["rows_left_out"] > 0
    assert "GPU-hours wasted:" in stopped.output
    ids = output_ids(out)
    assert len(ids) == len(set(ids))  # nothing written twice

    again = run("job", str(job), "--max-tokens", str(FULL_BUDGET), "--retry-truncated")
    assert again.exit_code == 0, again.output
    assert sorted(output_ids(out)) == sorted(f"q{i}" for i in range(ROWS))  # every row exactly once
    data = record(job)
    assert data["yield"]["clean"] == ROWS and data["yield"]["exports"] == {"specforge": ROWS, "parquet": ROWS}
    assert "yield_guard" not in data
    assert data["stages"]["down"]["status"] == "done" and data["stages"]["down"]["attempts"] == 2  # ran again
    assert f"rows: {ROWS:,} clean (100.0%), 0 flagged, 0 failed of {ROWS:,}" in again.output
    assert f"exports: specforge {ROWS:,} rows, parquet {ROWS:,} rows" in again.output
    assert run_phase(run_home) == "stopped"


def test_a_job_with_a_few_cut_answers_ends_done(make_job: JobFactory, run_home: Path) -> None:
    job = _cut_job(make_job, 0.02)
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(ROWS))
    found = record(job)["yield"]
    assert 0 < found["by_cause"]["truncated"] == found["flagged"] < 0.05 * ROWS
    assert found["exports"] == {"specforge": found["clean"]}
    assert "rows: " in result.output and "GPU-hours wasted: " in result.output
    report = run("report", str(job.parent / "out"), "--json")
    shown = json.loads(report.stdout)
    assert shown["exports"] == {"specforge": found["clean"]} and shown["by_cause"] == found["by_cause"]
    human = run("report", str(job.parent / "out")).output
    assert f"truncated {found['flagged']}" in human and f"specforge {found['clean']}" in human


def test_a_job_of_only_cut_rows_fails_its_export_and_still_stops_its_engine(
    make_job: JobFactory, run_home: Path
) -> None:
    """Every row processed (too few for the guard to judge), every one cut: the export has no
    row to write, and the engine is stopped all the same."""
    job = make_job(rows=6, standin={"faults": {"latency_s": 0.01, "cut_marker": "question"}})
    result = run("job", str(job))
    assert result.exit_code == 1, result.output
    assert "export specforge:" in result.output
    data = record(job)
    assert data["yield"]["clean"] == 0 and data["yield"]["by_cause"]["truncated"] == 6
    assert run_phase(run_home) == "stopped"


def test_a_finished_job_under_its_floor_ends_non_zero_naming_the_export(
    make_job: JobFactory, run_home: Path
) -> None:
    job = make_job(rows=6, standin={"faults": {"latency_s": 0.01, "cut_marker": "question 1"}}, extra="")
    result = run("job", str(job))
    assert result.exit_code == 0, result.output  # 5 of 6 clean: above 80%
    job.write_text(job.read_text().replace('output = "out"', 'output = "out2"\nmin_clean_yield = 90'))
    under = run("job", str(job))
    assert under.exit_code == 1, under.output
    assert (
        "the dataset is too small to use: every row was processed, but only 5 of 6 are clean" in under.output
    )
    assert "exports written: specforge 5 rows" in under.output
    assert json.loads((job.parent / "out2" / "job.json").read_text())["yield"]["exports"] == {"specforge": 5}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("min_clean_yield = 120", "[job] min_clean_yield: must be a percent from 0 to 100"),
        ("min_clean_yield = 0.8", "[job] min_clean_yield: 0.8 reads as a fraction"),
        ("guard_min_rows = 5", "[job] guard_min_rows: 5 rows are too few"),
    ],
)
def test_a_bad_floor_or_minimum_is_refused_before_anything(
    make_job: JobFactory, run_home: Path, line: str, said: str
) -> None:
    job = make_job()
    job.write_text(job.read_text().replace('output = "out"', f'output = "out"\n{line}'))
    result = run("job", str(job))
    assert result.exit_code == 2 and said in result.output, result.output
    assert not (job.parent / "out").exists()


def test_auto_max_tokens_without_a_context_is_refused_before_any_server(
    make_job: JobFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("specpilot.check.resolved.ResolvedSpec.context_tokens", lambda self: None)
    job = make_job(sampling={"max_tokens": "auto"})
    result = run("job", str(job))
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith("error: [job.sampling] max_tokens: auto needs")
    assert not (run_home.parent / "state" / "runs" / "jobsrv").exists()  # nothing started


def test_retry_truncated_without_rows_is_refused_before_any_server(
    make_job: JobFactory, run_home: Path
) -> None:
    job = make_job()
    result = run("job", str(job), "--max-tokens", "400", "--retry-truncated")
    assert result.exit_code == 2 and "--retry-truncated:" in result.output, result.output
    assert not (run_home.parent / "state" / "runs" / "jobsrv").exists()


def test_auto_max_tokens_covers_the_bench_p99_within_the_context(
    make_job: JobFactory, tmp_path: Path
) -> None:
    """With a bench the job proposes (and with "auto" uses) a max_tokens covering the sample's
    p99 within the context, says what share it expects cut at the configured one, and records it."""
    for auto in (True, False):
        job = load_job(make_job(sampling={"max_tokens": "auto" if auto else 900}))
        job.output.mkdir(parents=True, exist_ok=True)
        lengths = [100 + 10 * i for i in range(100)]  # p99 1080
        bench = {
            "output_lengths": lengths,
            "sampling": {"max_tokens": None},
            "sample": {"prompt_chars": [300]},
        }
        (job.output / "bench.json").write_text(json.dumps(bench))
        planned = ServerPlanRecord("jobsrv", "sglang", "0.5.13", None, (), {}, (), (), (), None, (), 4096)
        plans = {"plans": {"key": planned.to_json()}}
        rec = JobRecord(job.output / "job.json", {"stages": {"plan": {"evidence": plans}}})
        said: list[str] = []
        _max_tokens(job, rec, said.append)
        decided = rec.data["max_tokens"]
        assert context_tokens(rec) == 4096
        assert decided["evidence"]["p99"] == 1080 and decided["evidence"]["proposed"] == 1280
        if auto:
            assert decided["value"] == 1280 and decided["auto"]
            assert said[-1] == "max_tokens = auto: 1280"
        else:
            assert decided["value"] == 900 and decided["expected_cut_share"] == 0.2  # 20 of 100 >= 900
            assert "about 20.0% of rows are expected cut" in said[0]


def test_the_gpu_hours_wasted_add_up_from_their_parts(tmp_path: Path) -> None:
    """Rows left out pro rata by output tokens of generate's working time; an `up` that failed;
    restarts from death to ready; stalls beyond them; all over the job's GPU-hours."""
    from specpilot.job.cost import waste

    rec = JobRecord(tmp_path / "job.json", {})
    rec.begin("up", 2)
    rec.stage("up")["started_at"] -= 1800  # a start that failed after half an hour on 2 GPUs
    rec.fail("up", "timeout")
    assert rec.stage("up")["failed_gpu_hours"] == pytest.approx(1.0, abs=1e-3)
    assert rec.stage("up")["gpu_hours"] == pytest.approx(1.0, abs=1e-3)  # counted, not lost
    rec.data["stages"]["generate"] = {
        "status": "done", "gpus": 2, "gpu_hours": 10.0, "stalled_s": 1800.0,
        "evidence": {"completion_tokens": 1000, "flagged_completion_tokens": 250},
    }  # fmt: skip
    rec.data["restarts"] = [{"down_s": 900.0}]
    found = waste(rec, include_flagged=False)
    assert found.restarts == pytest.approx(0.5)  # 900 s on 2 GPUs
    assert found.stalls == pytest.approx(0.5)  # 1800 s all down, 900 of them the restart
    assert found.rows_left_out == pytest.approx((10.0 - 1.0) * 0.25)
    assert found.failed_starts == pytest.approx(1.0, abs=1e-3)
    assert found.share == pytest.approx((2.25 + 1.0 + 1.0) / 11.0, abs=1e-3)
    assert waste(rec, include_flagged=True).rows_left_out == 0.0  # exported: not wasted
