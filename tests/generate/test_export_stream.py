"""Exports stream: a part is read a line at a time and written a batch at a time, same rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.export import arrow
from specpilot.generate.writers.committed import committed_parts
from specpilot.generate.writers.parts import CLEAN
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import read_output
from tests.generate.test_job import _config


@pytest.fixture
def job(tmp_path: Path) -> Path:
    server = StandIn().start()
    try:
        assert run_generate(_config(tmp_path, [server], 25, rows_per_part=10)).exit_code == 0
    finally:
        server.close()
    return tmp_path / "out"


def test_parts_are_read_lazily_and_only_to_the_committed_byte(job: Path) -> None:
    first = sorted((job / "data").glob("part-*.jsonl"))[0]
    committed = [row["id"] for row in read_output(job)[:10]]
    with first.open("ab") as handle:
        handle.write(b'{"id": "not committed", "conversations": []}\n{"torn')
    parts = committed_parts(job, (CLEAN,))
    path, rows, lines = next(parts)
    assert path == first and rows == 10
    assert [row["id"] for row in lines] == committed
    assert sum(rows for _, rows, _ in parts) == 15


def test_a_part_cut_short_fails_before_any_row_is_read(job: Path) -> None:
    last = sorted((job / "data").glob("part-*.jsonl"))[-1]
    last.write_bytes(last.read_bytes()[:-10])
    result = CliRunner().invoke(cli, ["export", str(job), "--format", "speculators"])
    assert result.exit_code == 2 and "cut short" in result.output
    assert not list(job.glob("speculators.jsonl*"))


@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_batches_hold_every_row_once(job: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow, "BATCH_ROWS", 4)  # 10 rows a part: batches of 4, 4, 2
    result = CliRunner().invoke(cli, ["export", str(job), "--format", fmt, "--json"])
    assert result.exit_code == 0, result.output
    files = [Path(f) for f in json.loads(result.stdout)["files"]]
    if fmt == "parquet":
        assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [3, 3, 2]
        ids = [i for f in files for i in pq.read_table(f).column("id").to_pylist()]
    else:
        from datasets import load_from_disk

        ids = load_from_disk(str(job / "hf"))["id"]
    assert ids == [row["id"] for row in read_output(job)]
