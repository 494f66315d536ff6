"""`finish_bench`: what follows the search, the same for `specpilot bench` and the job's stage."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from specpilot.bench.finish import finish_bench
from specpilot.bench.measure import Measured, Settings
from specpilot.bench.run import BenchRequest, BenchResult
from specpilot.bench.variants import Variant
from specpilot.check.resolved import release_of
from specpilot.errors import EXIT_FAILED, UserError
from specpilot.generate.sampling import Sampling
from specpilot.spec import Spec, parse_spec

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "qwen3.6-27b"


def _spec(args: list[str]) -> Spec:
    return parse_spec(
        {"name": "fin", "model": {"path": str(MODEL)}, "gpu": {"memory_gib": 79.6},
         "engine": {"name": "sglang", "version": "0.5.17", "args": args}}
    )  # fmt: skip


def _request(tmp_path: Path, spec: Spec) -> BenchRequest:
    settings = Settings(
        tmp_path / "s.jsonl", tmp_path / "w.jsonl", 8, Sampling(thinking=False), 60.0, 5.0, 0.0, 60.0
    )
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    return BenchRequest(
        spec, release_of(spec), tmp_path / "prompts.jsonl", job_dir, [Variant()], 8, 0, settings
    )


def _result(spec: Spec, winner: str | None, *, started: bool = True) -> BenchResult:
    row = Measured("plain@8", "measured" if winner else "failed", max_running_requests=8)
    winning = spec.model_copy(
        update={"engine": spec.engine.model_copy(update={"args": ["--max-running-requests", "8"]})}
    )
    return BenchResult(spec, [row], {"plain@8": winning}, winner, 1000, 8, None, {}, [], [], started)


def test_a_winner_is_charted_written_and_exits_0(tmp_path: Path) -> None:
    spec = _spec([])
    best = tmp_path / "best.toml"
    finished = finish_bench(_result(spec, "plain@8"), _request(tmp_path, spec), best)
    assert finished.svg_path == tmp_path / "job" / "bench.svg" and finished.svg_path.read_text().startswith(
        "<svg"
    )
    assert finished.best_path == best and finished.bench_path == tmp_path / "job" / "bench.json"
    written = tomllib.loads(best.read_text())
    assert written["name"] == "fin" and written["engine"]["args"] == ["--max-running-requests", "8"]
    assert finished.exit_code() == 0
    # no bench.json in the folder: nothing to project from
    assert finished.projection is None and finished.to_json()["projection"] is None


def test_every_started_point_failed_writes_no_winner_and_exits_failed(tmp_path: Path) -> None:
    spec = _spec([])
    best = tmp_path / "best.toml"
    finished = finish_bench(_result(spec, None), _request(tmp_path, spec), best)
    assert finished.best_path is None and not best.exists()
    assert finished.svg_path.is_file()  # the chart shows why each point failed
    assert finished.exit_code() == EXIT_FAILED


def test_no_point_started_is_bad_input_naming_the_budget(tmp_path: Path) -> None:
    spec = _spec([])
    finished = finish_bench(_result(spec, None, started=False), _request(tmp_path, spec), None)
    with pytest.raises(UserError) as raised:
        finished.exit_code()
    assert raised.value.field == "--budget-s"
