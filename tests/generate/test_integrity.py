"""Committed rows carry a checksum; damage to them is found, said, and repaired by a rerun.

Once, one changed byte inside a committed line went unnoticed ("all 20 rows done", exit
0), a shard deleted while the job ran was reported as success with no rows on disk, and
an input row without a prompt key was dropped without a word in the final line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import Faults, StandIn, answer_for
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

PART = Path("data") / "part-00000.jsonl"


def _config(tmp_path: Path, server: StandIn, rows: list[dict[str, Any]], **extra: Any) -> JobConfig:
    settings: dict[str, Any] = {"concurrency": 4, "show_progress": False, "flush_interval_s": 0.02, **extra}
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    return JobConfig(path, tmp_path / "out", [Endpoint(server.url)], None, Sampling(True), **settings)


def _check_rows(out: Path, count: int) -> None:
    rows = read_output(out)
    assert sorted(row["id"] for row in rows) == sorted(f"q{i}" for i in range(count))
    for row in rows:
        assert row["conversations"][-1]["content"] == answer_for(row["conversations"][-2]["content"])[0]


@pytest.mark.parametrize(
    ("old", "new"),
    [(b"answer: q 7", b"answer: q 8"), (b'"id":"q7"', b'"id":"q9"'), (b'"id":"q7"', b'"iX":"q7"')],
    ids=["a byte of the answer", "a byte of the id", "a byte of a key"],
)
def test_a_changed_committed_byte_is_found_said_and_generated_again(
    tmp_path: Path, fake_server: StandIn, old: bytes, new: bytes
) -> None:
    config = _config(tmp_path, fake_server, prompt_rows(20))
    assert run_generate(config).exit_code == 0
    part = config.output_dir / PART
    data = part.read_bytes()
    assert data.count(old) == 1
    part.write_bytes(data.replace(old, new))

    exported = CliRunner().invoke(cli, ["export", str(config.output_dir), "--format", "specforge"])
    assert exported.exit_code == 2
    assert "changed since it was written (its checksum does not match the ledger)" in exported.stderr
    assert str(part) in exported.stderr and "rerun the same `specpilot generate`" in exported.stderr

    notes: list[str] = []
    sent_before = fake_server.counts.answered
    outcome = run_generate(JobConfig(**{**config.__dict__, "notify": notes.append}))
    assert (outcome.exit_code, outcome.message) == (0, "all 20 rows done")
    assert fake_server.counts.answered == sent_before + 1  # only the changed row is sent again
    assert any(
        "1 committed rows in part-00000.jsonl" in note and "checksum mismatch" in note for note in notes
    )
    _check_rows(config.output_dir, 20)
    assert CliRunner().invoke(cli, ["export", str(config.output_dir), "--format", "specforge"]).exit_code == 0


def test_a_shard_deleted_while_the_job_runs_is_not_success(tmp_path: Path) -> None:
    server = StandIn(Faults(latency_s=0.01)).start()
    part = tmp_path / "out" / PART

    @contextlib.asynccontextmanager
    async def delete_first_shard(job: object) -> AsyncIterator[object]:
        async def delete_when_written() -> None:
            while not part.exists() or not part.stat().st_size:
                await asyncio.sleep(0.005)
            part.unlink()  # the writer keeps appending to the unlinked file

        task = asyncio.create_task(delete_when_written())
        yield None
        await task

    try:
        config = _config(tmp_path, server, prompt_rows(50), concurrency=2)
        outcome = run_generate(config, delete_first_shard)
        assert outcome.exit_code == 1
        assert outcome.message.startswith("data/part-00000.jsonl lost rows while the job ran")
        assert "run the same command again" in outcome.message
        resumed = run_generate(config)
    finally:
        server.close()
    assert (resumed.exit_code, resumed.message) == (0, "all 50 rows done")
    _check_rows(tmp_path / "out", 50)


def test_a_row_without_a_prompt_key_is_said_in_the_final_line(tmp_path: Path, fake_server: StandIn) -> None:
    rows = [*prompt_rows(10), {"id": "no-prompt", "text": "what the row meant to ask"}]
    outcome = run_generate(_config(tmp_path, fake_server, rows))
    assert outcome.exit_code == 0
    assert (
        outcome.message
        == f"all 10 rows done; 1 input rows were rejected (see {tmp_path / 'out' / 'rejected.jsonl'})"
    )
    rejected = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejected] == ["no-prompt"]
    again = run_generate(_config(tmp_path, fake_server, rows))  # a resume says it too
    assert again.message == outcome.message


def test_a_clock_jump_during_the_job_is_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ten-year jump once gave elapsed_s of ten years without a word."""
    import time

    server = StandIn(Faults(latency_s=0.02)).start()
    real_time, jump_s = time.time, 10 * 365 * 86400.0
    answered = server.counts

    def jumping() -> float:  # the wall clock leaps once the job is half done
        return real_time() + (jump_s if answered.answered >= 10 else 0.0)

    notes: list[str] = []
    try:
        config = _config(tmp_path, server, prompt_rows(20), concurrency=1, notify=notes.append)
        monkeypatch.setattr(time, "time", jumping)
        outcome = run_generate(config)
    finally:
        monkeypatch.undo()
        server.close()
    assert outcome.exit_code == 0, outcome.message
    warned = [note for note in notes if note.startswith("warning: the system clock jumped by +315360")]
    assert len(warned) == 1 and "elapsed_s" in warned[0], notes
    # and `report` says so later, not only the run that saw it
    reported = CliRunner().invoke(cli, ["report", str(config.output_dir), "--json"])
    assert round(json.loads(reported.stdout)["clock_jump_s"], -6) == 315000000
    shown = CliRunner().invoke(cli, ["report", str(config.output_dir)])
    assert "clock jumped by +315360" in shown.stdout
