"""The job's projected time in `plan --job`, `generate`'s progress and `report`: the
arithmetic on the rates the bench result or the job itself measured, and what it rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from tests.generate.fake_server import FakeServer, Faults

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
def slow_server() -> FakeServer:
    server = FakeServer(Faults(latency_s=0.05)).start()
    yield server  # type: ignore[misc]
    server.close()


def test_generate_prints_the_projection_and_report_rests_it_on_the_job(
    tmp_path: Path, slow_server: FakeServer
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(60)))
    out = tmp_path / "out"
    ran = CliRunner().invoke(
        cli,
        ["generate", "--input", str(prompts), "--output", str(out), "--server", slow_server.url,
         "--concurrency", "2", "--progress-interval-s", "0.3"],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    lines = [line for line in ran.output.splitlines() if line.startswith("projected: rows left")]
    assert (
        lines
        and "GPU-hours" in lines[-1]
        and "this job:" in lines[-1]
        and "over the last minute" in lines[-1]
    )
    report = json.loads(CliRunner().invoke(cli, ["report", str(out), "--gpus", "2", "--json"]).output)
    whole = report["projection"]["whole input"]
    # the fake server writes 4 tokens a row; its whole-job rate, on one server, in 2 GPUs
    rate = report["output_tokens_per_s_overall"]
    assert whole["rows"] == 60 and whole["servers"] == 2
    assert whole["wall_s"] == pytest.approx(60 * 4 / rate / 2, abs=0.1)  # wall_s is kept to 0.1 s
    assert "1 GPU per server assumed (no bench.json)" in whole["rests_on"]
