"""A bug in the live page's sampler stops `generate --serve-status` with one named line.

Before, the sampler ran as a task nobody awaited: its error vanished and the page kept
showing the numbers of the moment it died while the job ran on for hours.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.status.live import LiveRecorder
from tests.fakeengines.standin import Faults, StandIn
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

ROWS = 40


def _generate(tmp_path: Path, url: str, *, debug: bool = False) -> tuple[int, str]:
    args = [
        *(["--debug"] if debug else []), "generate", "--input", str(write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS))),
        "--output", str(tmp_path / "out"), "--server", url, "--serve-status", "127.0.0.1:0",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


def test_a_failing_sampler_ends_the_job_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def sample(self: LiveRecorder, now_s: float | None = None) -> None:
        raise RuntimeError("bug in the sampler")

    monkeypatch.setattr(LiveRecorder, "sample", sample)
    server = StandIn(Faults()).start()
    try:
        code, output = _generate(tmp_path, server.url)
    finally:
        server.close()
    assert code == 1, output
    assert "the live page's sampler failed: RuntimeError: bug in the sampler" in output
    assert "--debug" in output and "Traceback" not in output


def test_with_debug_the_traceback_names_the_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def sample(self: LiveRecorder, now_s: float | None = None) -> None:
        raise RuntimeError("bug in the sampler")

    monkeypatch.setattr(LiveRecorder, "sample", sample)
    server = StandIn(Faults()).start()
    try:
        code, output = _generate(tmp_path, server.url, debug=True)
    finally:
        server.close()
    assert code == 1
    assert "Traceback" in output and "in sample" in output


def test_a_working_sampler_leaves_the_job_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = []
    original = LiveRecorder.sample

    def sample(self: LiveRecorder, now_s: float | None = None) -> None:
        samples.append(now_s)
        original(self, now_s)

    monkeypatch.setattr(LiveRecorder, "sample", sample)
    server = StandIn(Faults()).start()
    try:
        code, output = _generate(tmp_path, server.url)
    finally:
        server.close()
    assert code == 0, output
    assert samples, "the sampler never ran"
    assert sorted(row["id"] for row in read_output(tmp_path / "out")) == sorted(f"q{i}" for i in range(ROWS))
