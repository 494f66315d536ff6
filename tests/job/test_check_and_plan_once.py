"""The job's check and plan stages read one resolution of each server spec: the model read
once and the flags evaluated once, where they used to be resolved again for the plan."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from specpilot.job.pipeline import _check_and_plan
from specpilot.job.record import JobRecord
from specpilot.job.spec import JobFile
from specpilot.spec import load_spec
from tests.counting import Counted

SPEC = Path(__file__).resolve().parents[2] / "examples" / "qwen36-27b-mtp-sglang-fixed.toml"


def test_the_job_resolves_its_server_spec_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = JobFile(tmp_path / "job.toml", SPEC, None, tmp_path / "prompts.jsonl", tmp_path / "out")
    record = JobRecord(tmp_path / "job.json", {})
    said: list[str] = []
    found = Counted(monkeypatch)
    asyncio.run(_check_and_plan(job, record, said.append))
    assert record.done("check") and record.done("plan"), said
    assert found.reads == 1
    assert found.evaluations[tuple(load_spec(SPEC).engine.args)] == 1
    assert set(found.evaluations.values()) == {1}, found.evaluations
