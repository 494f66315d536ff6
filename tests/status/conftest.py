"""Fixtures for the status tests: a small finished job to view."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import Faults, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, write_jsonl


@pytest.fixture
def finished_job(tmp_path: Path) -> Path:
    server = StandIn(Faults()).start()
    try:
        config = JobConfig(
            write_jsonl(tmp_path / "in.jsonl", prompt_rows(40)),
            tmp_path / "out",
            [Endpoint(server.url)],
            None,
            Sampling(True),
            concurrency=8,
            show_progress=False,
            flush_interval_s=0.05,
        )
        assert run_generate(config).exit_code == 0
    finally:
        server.close()
    return tmp_path / "out"
