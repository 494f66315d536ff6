"""An export is whole or absent: written beside the target and renamed at the end, never into
the job's own folder, an --overwrite replaces the whole target, and a refused or killed export
leaves nothing loadable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.fakeengines.standin import CUT_MARKER, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows
from tests.generate.test_job import _config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """30 rows in 3 clean parts of 10, and 2 flagged (cut off) rows."""
    rows = [*prompt_rows(30), *({"id": f"cut{i}", "prompt": f"{CUT_MARKER} {i}"} for i in range(2))]
    server = StandIn().start()
    try:
        assert run_generate(_config(tmp_path, [server], 0, input_rows=rows, rows_per_part=10)).exit_code == 0
    finally:
        server.close()
    return tmp_path / "out"


def export(*args: str) -> Result:
    return CliRunner().invoke(cli, ["export", *args])


def _job_bytes(job: Path) -> dict[str, bytes]:
    return {str(p.relative_to(job)): p.read_bytes() for p in sorted(job.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("fmt", "to"),
    [
        ("specforge", "data/part-00000.jsonl"),
        ("parquet", "data"),
        ("hf", "."),
        ("parquet", ".."),
        ("speculators", "errors.jsonl"),
        ("specforge", "ledger.sqlite"),
        ("specforge", "rejected.jsonl"),
    ],
)
def test_an_export_never_writes_into_the_job_folder(job: Path, fmt: str, to: str) -> None:
    before = _job_bytes(job)
    refused = export(str(job), "--format", fmt, "--to", str(job / to), "--overwrite")
    assert refused.exit_code == 2, refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: --to: ") and "the job folder" in line and "give a path outside" in line
    assert _job_bytes(job) == before
    assert export(str(job), "--format", "specforge").exit_code == 0  # the job is whole


def test_a_new_name_of_the_users_beside_the_jobs_files_is_written(job: Path) -> None:
    """`--to out/whole.jsonl` (a second export next to the default one) is the user's own file,
    none of the job's: written, and the job's files are untouched."""
    before = _job_bytes(job)
    written = export(str(job), "--format", "specforge", "--to", str(job / "whole.jsonl"))
    assert written.exit_code == 0, written.output
    assert (job / "whole.jsonl").read_text().count("\n") >= 1
    assert {k: v for k, v in _job_bytes(job).items() if k != "whole.jsonl"} == before


def test_overwrite_replaces_the_whole_target(job: Path, tmp_path: Path) -> None:
    to = tmp_path / "shards"
    first = export(str(job), "--format", "parquet", "--to", str(to), "--include-flagged", "--json")
    assert first.exit_code == 0 and json.loads(first.stdout)["rows"] == 32
    assert any(p.name.startswith("flagged-") for p in to.iterdir())
    again = export(str(job), "--format", "parquet", "--to", str(to), "--overwrite", "--json")
    assert again.exit_code == 0, again.output
    import pyarrow.parquet as pq

    assert sorted(p.name for p in to.iterdir()) == sorted(
        Path(f).name for f in json.loads(again.stdout)["files"]
    )
    assert pq.read_table(to).num_rows == 30  # no flagged shard left beside the clean ones
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".shards")]


def test_overwrite_refuses_a_folder_that_is_not_an_export(job: Path, tmp_path: Path) -> None:
    to = tmp_path / "mine"
    to.mkdir()
    (to / "notes.txt").write_text("keep me")
    refused = export(str(job), "--format", "hf", "--to", str(to), "--overwrite")
    assert refused.exit_code == 2 and "holds notes.txt, which no hf export writes" in refused.stderr
    assert (to / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("fmt", ["specforge", "parquet", "hf"])
def test_a_refused_export_leaves_nothing_and_keeps_the_earlier_one(
    job: Path, tmp_path: Path, fmt: str
) -> None:
    to = tmp_path / ("exported.jsonl" if fmt == "specforge" else "exported")
    fresh = tmp_path / ("fresh.jsonl" if fmt == "specforge" else "fresh")
    assert export(str(job), "--format", fmt, "--to", str(to)).exit_code == 0
    earlier = {p: p.read_bytes() for p in ([to] if to.is_file() else to.iterdir())}
    part = job / "data" / "part-00001.jsonl"
    flipped = bytearray(part.read_bytes())
    flipped[len(flipped) // 2] ^= 0x01  # a flipped byte in the second part, read after the first
    part.write_bytes(bytes(flipped))
    for target, extra in ((fresh, []), (to, ["--overwrite"])):
        refused = export(str(job), "--format", fmt, "--to", str(target), *extra)
        assert refused.exit_code == 2 and "changed since it was written" in refused.stderr, refused.output
    assert not fresh.exists()  # nothing loadable: no partial folder or file
    assert {p: p.read_bytes() for p in earlier} == earlier and len(
        list(Path(to).parent.glob(f"{to.name}*"))
    ) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


KILL_AT_PUBLISH = """
import os, signal, sys
from specpilot.export import run
run.publish = lambda partial, to: os.kill(os.getpid(), signal.SIGKILL)
from specpilot.cli import cli
cli(sys.argv[1:])
"""


@pytest.mark.parametrize("fmt", ["parquet", "specforge"])
def test_a_killed_export_leaves_no_target_and_a_rerun_works(job: Path, tmp_path: Path, fmt: str) -> None:
    to = tmp_path / ("exported.jsonl" if fmt == "specforge" else "exported")
    args = ["export", str(job), "--format", fmt, "--to", str(to)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    killed = subprocess.run([sys.executable, "-c", KILL_AT_PUBLISH, *args], env=env, capture_output=True)
    assert killed.returncode == -9
    assert not to.exists()
    assert [p.name for p in tmp_path.glob(f".{to.name}.*.tmp")]  # the killed export's partial
    rerun = export(*args[1:], "--json")
    assert rerun.exit_code == 0, rerun.output
    assert json.loads(rerun.stdout)["rows"] == 30
    assert not list(tmp_path.glob(f".{to.name}.*"))  # the killed one's partial is gone too
