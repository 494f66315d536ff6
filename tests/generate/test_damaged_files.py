"""A ledger replaced by garbage and a part replaced by a directory: `generate` and `verify`
say which file and what to do in one line (once: "unexpected DatabaseError/IsADirectoryError");
once the part is moved away, `verify` queues its rows and the rerun generates them again."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

ROWS = 20


def _done(tmp_path: Path, server: StandIn) -> JobConfig:
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS))
    config = JobConfig(
        path, tmp_path / "out", [Endpoint(server.url)], None, Sampling(True),
        concurrency=2, show_progress=False, rows_per_part=5, notify=lambda _: None,
    )  # fmt: skip
    assert run_generate(config).exit_code == 0
    return config


def _verify_line(out: Path) -> str:
    result = CliRunner().invoke(cli, ["verify", str(out)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "unexpected" not in lines[0], result.output
    return lines[0]


def test_a_ledger_replaced_by_garbage(tmp_path: Path, fake_server: StandIn) -> None:
    config = _done(tmp_path, fake_server)
    out = config.output_dir
    for extra in ("ledger.sqlite-wal", "ledger.sqlite-shm"):
        (out / extra).unlink(missing_ok=True)
    (out / "ledger.sqlite").write_bytes(b"garbage, not a database\n" * 200)
    with pytest.raises(UserError) as refused:
        run_generate(config)
    assert f"{out / 'ledger.sqlite'} is damaged" in str(refused.value)
    assert f"specpilot verify {out}" in str(refused.value)
    line = _verify_line(out)
    assert f"{out / 'ledger.sqlite'} is damaged" in line and "DIR" in line


def test_an_older_part_replaced_by_a_directory(tmp_path: Path, fake_server: StandIn) -> None:
    config = _done(tmp_path, fake_server)
    out = config.output_dir
    part = out / "data" / "part-00001.jsonl"
    part.rename(tmp_path / "moved.jsonl")
    part.mkdir()
    with pytest.raises(UserError) as refused:
        run_generate(config)
    assert f"{part} is a directory" in str(refused.value) and f"specpilot verify {out}" in str(refused.value)
    assert f"{part} is a directory" in _verify_line(out)
    part.rmdir()  # as the fix says: out of the way, then verify
    verified = CliRunner().invoke(cli, ["verify", str(out), "--json"], catch_exceptions=False)
    assert '"requeued_rows": 5' in verified.output, verified.output
    assert run_generate(config).message == f"all {ROWS} rows done"
    assert sorted(r["id"] for r in read_output(out)) == sorted(r["id"] for r in prompt_rows(ROWS))
