"""A job walks one `ServerPlan` from its plan stage to its healer: the model is read once and
the engine release looked up once for the whole command, a restart included, where `up` used to
read and resolve the spec again and the healer once more for each restart. job.json keeps each
stage's server plan as `ServerPlanRecord.to_json()`, read back typed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.check import resolved
from specpilot.cli import cli
from specpilot.engines.adapter import EngineRelease
from specpilot.launch.server_plan import ServerPlanRecord
from specpilot.models import files, host_files
from tests.job.conftest import JobFactory, output_ids


def test_a_job_reads_its_model_once_and_looks_its_release_up_once(
    make_job: JobFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    lookups: list[tuple[str, str]] = []
    read, look_up = host_files.read_local_model, resolved.engine_release

    def counted_read(folder: Path) -> files.ModelFiles:
        reads.append(folder)
        return read(folder)

    def counted_lookup(name: str, version: str) -> EngineRelease:
        lookups.append((name, version))
        return look_up(name, version)

    monkeypatch.setattr(host_files, "read_local_model", counted_read)
    monkeypatch.setattr(resolved, "engine_release", counted_lookup)
    once = run_home.parent / "died-once"
    job = make_job(rows=30, standin={"die_after_answers": 6, "die_once_file": str(once)})
    result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert once.exists() and "restart 1 of 3" in result.output  # the healer started it again
    assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(30))
    assert len(reads) == 1, reads
    assert lookups == [("sglang", "0.5.13")]


def test_job_json_keeps_each_stages_server_plan_and_reads_it_back_typed(
    make_job: JobFactory, run_home: Path
) -> None:
    job = make_job()
    result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads((job.parent / "out" / "job.json").read_text())
    [planned] = data["stages"]["plan"]["evidence"]["plans"].values()
    up = data["stages"]["up"]["evidence"]
    for stored in (planned, up["server_plan"]):
        recorded = ServerPlanRecord.from_json(stored)
        assert recorded.to_json() == stored
        assert ServerPlanRecord.from_json(json.loads(json.dumps(recorded.to_json()))) == recorded
    started = ServerPlanRecord.from_json(up["server_plan"])
    assert started.name == "jobsrv" and started.plan is not None and started.plan.fits
    # the flags the engine ran with: the spec's, and those `up` adds (a check finding's fix)
    assert list(started.args) == [*up["args"], *(arg for added in started.added for arg in added.args)]
    assert started.added and set(started.args) <= set(up["argv_verified"])
    assert started.context_tokens is not None and started.context_tokens > 0


def test_a_plan_recorded_by_another_release_is_planned_again_not_refused(
    make_job: JobFactory, run_home: Path
) -> None:
    """A resume of a job begun by an older specpilot (its plan stage recorded in another shape)
    plans again and goes on; before, it stopped with "run the job again with --restart-from plan"."""
    job = make_job(rows=6, args=["--context-length", "4096"], sampling={"max_tokens": "auto"})
    first = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    path = job.parent / "out" / "job.json"
    data = json.loads(path.read_text())
    plans = data["stages"]["plan"]["evidence"]["plans"]
    for plan in plans.values():
        del plan["context_tokens"]  # as a release before the server plan recorded it
    path.write_text(json.dumps(data))
    again = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert "recorded by another specpilot release; planning again" in again.output
    stage = json.loads(path.read_text())["stages"]["plan"]
    assert stage["attempts"] == 2
    assert [ServerPlanRecord.from_json(p).context_tokens for p in stage["evidence"]["plans"].values()] == [
        4096
    ]
    assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(6))
