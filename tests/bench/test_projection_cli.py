"""The job's projected time in `plan --job`, `generate`'s progress and `report`: the
arithmetic on the rates the bench result or the job itself measured, and what it rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.projection import BatchRates, Projection, job_rates, project, project_job
from tests.fakeengines.standin import Faults, StandIn

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "qwen36-27b-mtp-sglang.toml"  # NEXTN at 3 draft tokens


def _bench_result(job: Path, rates: dict[str, float], *, winner: str, mean: float, rows: int) -> None:
    variants = [
        {"label": label, "output_tokens_per_s": rate, "mean_output_tokens": mean, "steady_s": 30.0}
        for label, rate in rates.items()
    ]
    job.mkdir(parents=True, exist_ok=True)
    (job / "bench.json").write_text(
        json.dumps(
            {
                "spec": "qwen36-mtp",
                "gpus_per_server": 1,
                "sample": {"rows": 64},
                "finished_at": "2026-12-01T00:00:00Z",
                "input_rows": rows,
                "winner": winner,
                "mean_output_tokens": mean,
                "variants": variants,
            }
        )
    )


def test_plan_projects_this_spec_and_the_winner_from_the_bench_result(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _bench_result(job, {"plain": 2000.0, "NEXTN-3": 1000.0}, winner="plain", mean=4000.0, rows=900_000)
    ran = CliRunner().invoke(cli, ["plan", str(SPEC), "--job", str(job), "--gpus", "8", "--json"])
    projection = json.loads(ran.output)["projection"]
    # 900,000 rows x 4,000 tokens at 1,000 tok/s per GPU: 1,000 GPU-hours, 125 h on 8 GPUs
    own = projection["this spec (NEXTN-3)"]
    assert (own["gpu_hours"], own["wall_s"], own["servers"]) == (1000.0, 450_000.0, 8)
    assert projection["bench's winner (plain)"]["gpu_hours"] == 500.0
    assert "variant NEXTN-3: 1,000 out tok/s steady over 30 s" in own["rests_on"]
    text = CliRunner().invoke(cli, ["plan", str(SPEC), "--job", str(job), "--gpus", "8"]).output
    assert "projected, this spec (NEXTN-3): 900,000 rows on 8 GPUs: 1,000.0 GPU-hours, 5d05h wall" in text


def test_plan_without_a_bench_result_says_how_to_get_one(tmp_path: Path) -> None:
    text = CliRunner().invoke(cli, ["plan", str(SPEC), "--job", str(tmp_path)]).output
    assert f"no bench result in {tmp_path}: `specpilot bench SPEC --prompts FILE --job {tmp_path}`" in text


@pytest.fixture
def slow_server() -> StandIn:
    server = StandIn(Faults(latency_s=0.05)).start()
    yield server  # type: ignore[misc]
    server.close()


def _generate(prompts: Path, out: Path, server: StandIn, *options: str) -> Result:
    """`generate` of `prompts` into `out` on the stand-in, two at a time; it must succeed."""
    argv = [
        "generate",
        "--input",
        str(prompts),
        "--output",
        str(out),
        "--server",
        server.url,
        "--concurrency",
        "2",
    ]
    ran = CliRunner().invoke(cli, [*argv, *options])
    assert ran.exit_code == 0, ran.output
    return ran


def test_generate_prints_the_projection_and_report_rests_it_on_the_job(
    tmp_path: Path, slow_server: StandIn
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(60)))
    out = tmp_path / "out"
    ran = _generate(prompts, out, slow_server, "--progress-interval-s", "0.3")
    lines = [line for line in ran.output.splitlines() if line.startswith("projected: rows left")]
    assert lines and "GPU-hours" in lines[-1] and "this job:" in lines[-1] and "over the last" in lines[-1]
    report = json.loads(CliRunner().invoke(cli, ["report", str(out), "--gpus", "2", "--json"]).output)
    whole = report["projection"]["whole input"]
    # the stand-in writes 4 tokens a row; its whole-job rate, on one server, in 2 GPUs
    rate = report["output_tokens_per_s_overall"]
    assert whole["rows"] == 60 and whole["servers"] == 2
    assert whole["wall_s"] == pytest.approx(60 * 4 / rate / 2, abs=0.1)  # wall_s is kept to 0.1 s
    assert "1 GPU per server assumed (no bench.json)" in whole["rests_on"]
    assert whole["tail_share"] is None and "no tail modelled" in whole["rests_on"]


#: one server's measured output rates per number in flight (a drain from 32 down), and a sample
#: of output lengths with a long tail: what bench.json holds for a measured point
RATES_BY_BATCH = [
    {"in_flight": 31.5, "output_tokens": 40_000.0, "seconds": 20.0, "output_tokens_per_s": 2000.0},
    {"in_flight": 16.0, "output_tokens": 6_000.0, "seconds": 5.0, "output_tokens_per_s": 1200.0},
    {"in_flight": 4.0, "output_tokens": 2_000.0, "seconds": 5.0, "output_tokens_per_s": 400.0},
]
LENGTHS = [300] * 40 + [600] * 20 + [4000] * 4


def _played_bench(job: Path, *, rows: int) -> tuple[BatchRates, float]:
    mean = sum(LENGTHS) / len(LENGTHS)
    variant = {
        "label": "plain@32", "output_tokens_per_s": 2000.0, "mean_output_tokens": mean, "steady_s": 20.0,
        "max_running_requests": 32, "rates_by_batch": RATES_BY_BATCH, "largest_in_flight": 32,
    }  # fmt: skip
    job.mkdir(parents=True, exist_ok=True)
    (job / "bench.json").write_text(
        json.dumps(
            {
                "spec": "qwen36-mtp", "gpus_per_server": 1, "sample": {"rows": len(LENGTHS)},
                "finished_at": "2026-12-01T00:00:00Z", "input_rows": rows, "winner": "plain@32",
                "mean_output_tokens": mean, "output_lengths": LENGTHS, "variants": [variant],
            }
        )
    )  # fmt: skip
    points = tuple((p["in_flight"], p["output_tokens"], p["seconds"]) for p in RATES_BY_BATCH)
    return BatchRates(points, 32), mean


def test_plan_job_plays_the_waves_and_the_tail_as_bench_does(tmp_path: Path) -> None:
    """`plan --job` projects with bench's own model (`project_job` on the point's rates per
    batch size and the sample's output lengths): the same wall time and tail, longer than the
    steady rate alone says, the tail's share stated."""
    job = tmp_path / "job"
    rates, mean = _played_bench(job, rows=5_000)
    bench_job = project_job(LENGTHS, 5_000, 32, rates.rate_at, servers=2)
    ran = CliRunner().invoke(cli, ["plan", str(SPEC), "--job", str(job), "--gpus", "2", "--json"])
    winner = json.loads(ran.output)["projection"]["bench's winner (plain@32)"]
    assert winner["wall_s"] == pytest.approx(bench_job.wall_s, abs=0.1)
    assert winner["tail_s"] == pytest.approx(bench_job.tail_s, abs=0.1)
    assert (
        winner["tail_share"] == pytest.approx(bench_job.tail_share, abs=1e-4) and winner["tail_share"] > 0.01
    )
    steady_s = 2_500 * mean / 2000.0
    assert winner["wall_s"] > steady_s * 1.01  # the tail and the ramp are in it
    text = CliRunner().invoke(cli, ["plan", str(SPEC), "--job", str(job), "--gpus", "2"]).output
    assert f"{bench_job.tail_share:.1%} of it the tail" in text


def test_a_running_job_is_played_on_the_bench_shape_at_its_own_level(tmp_path: Path) -> None:
    """generate's and report's projection (`job_rates`): at bench's own rate and mean it is
    bench's projection; twice the rate halves it; twice the mean doubles the answers."""
    job = tmp_path / "job"
    rates, mean = _played_bench(job, rows=5_000)
    own = project_job(LENGTHS, 5_000, 32, rates.rate_at)

    def projected(rate: float, tokens_per_row: float) -> Projection:
        found = job_rates(
            done_rows=100, output_tokens=round(100 * tokens_per_row), output_tokens_per_s=rate,
            servers=1, over="over the last minute", job_dir=job,
        )  # fmt: skip
        assert found is not None
        return project(5_000, found)

    same = projected(rates.rate_at(32), mean)
    assert same.wall_s == pytest.approx(own.wall_s, rel=0.01) and same.tail_s is not None
    assert same.tail_s == pytest.approx(own.tail_s, rel=0.02)
    assert "waves and tail played on the bench winner plain@32's rates" in same.rests_on
    assert projected(2 * rates.rate_at(32), mean).wall_s == pytest.approx(own.wall_s / 2, rel=0.01)
    assert projected(rates.rate_at(32), 2 * mean).wall_s == pytest.approx(own.wall_s * 2, rel=0.02)


def test_generate_and_report_state_the_tail_share_with_a_bench_result(
    tmp_path: Path, slow_server: StandIn
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(40)))
    out = tmp_path / "out"
    _played_bench(out, rows=40)
    ran = _generate(prompts, out, slow_server, "--progress-interval-s", "0.3")
    lines = [line for line in ran.output.splitlines() if line.startswith("projected: rows left")]
    assert lines and "of it the tail" in lines[-1] and "bench winner plain@32" in lines[-1]
    report = json.loads(CliRunner().invoke(cli, ["report", str(out), "--json"]).output)
    whole = report["projection"]["whole input"]
    assert whole["tail_share"] is not None and 0 < whole["tail_share"] < 1
    text = CliRunner().invoke(cli, ["report", str(out)]).output
    assert "of it the tail" in text


@pytest.mark.parametrize("bench", [True, False])
def test_report_s_eta_is_the_rows_left_projection_where_that_plays_the_tail(
    tmp_path: Path, slow_server: StandIn, bench: bool
) -> None:
    """`report` once gave two times for the rows left: an eta from the last minute's rows/s
    alone and, below it, the projection with waves and tail. With a bench sample's lengths
    they are one number; without, the eta says it has no tail. On other GPUs (--gpus) the
    projection is a what-if and the eta stays the job's own."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(40)))
    out = tmp_path / "out"
    if bench:
        _played_bench(out, rows=40)
    _generate(prompts, out, slow_server, "--limit", "10")
    report = json.loads(CliRunner().invoke(cli, ["report", str(out), "--json"]).output)
    assert report["state"] == "incomplete" and report["eta_s"] is not None
    left = report["projection"]["rows left"]
    if bench:
        assert left["tail_s"] is not None and report["eta_s"] == left["wall_s"]
        assert report["eta_basis"] == "rows left played in waves, tail included"
    else:
        assert left["tail_s"] is None
        assert report["eta_s"] == pytest.approx(30 / report["rows_per_s"], abs=0.1)
        assert report["eta_basis"].endswith("; no tail")
    elsewhere = json.loads(CliRunner().invoke(cli, ["report", str(out), "--gpus", "8", "--json"]).output)
    assert elsewhere["eta_s"] == pytest.approx(30 / elsewhere["rows_per_s"], abs=0.1)
    text = CliRunner().invoke(cli, ["report", str(out)]).output
    (eta_row,) = [line for line in text.splitlines() if line.startswith("│ eta ")]
    assert f"({report['eta_basis']})" in eta_row
