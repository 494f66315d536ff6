"""`export`, `report` and `view` on a full disk and on a read-only one: one line, path and fix.

Once, `export` to a full disk ended in the catch-all ("unexpected OSError ... please report
it"), and on a read-only filesystem (an archived dataset) `report` and `export` said the
intact ledger "cannot be read ... restore the folder from a backup". The disks here are
real: a small tmpfs, and one remounted read-only (which needs permission to mount).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.export.formats import FORMATS
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import write_jsonl


def _mount(args: list[str]) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()})")


def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    _mount(["-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)])
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 128 KiB tmpfs: smaller than any export of the job below."""
    yield from _tmpfs(tmp_path / "small-disk", "128k")


@pytest.fixture
def archive_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs the job is copied to, then remounted read-only."""
    yield from _tmpfs(tmp_path / "archive-disk", "8m")


@pytest.fixture
def job(tmp_path: Path, fake_server: StandIn) -> Path:
    """A finished job with rows big enough to overflow the small disk in any format."""
    # hex digests: text no compressor shrinks below the small disk
    rows = [
        {
            "id": f"r{i}",
            "prompt": " ".join(hashlib.sha256(f"{i}-{j}".encode()).hexdigest() for j in range(64)),
        }
        for i in range(40)
    ]
    out = tmp_path / "out"
    config = JobConfig(
        write_jsonl(tmp_path / "in.jsonl", rows), out, [Endpoint(fake_server.url)], None, Sampling(True),
        show_progress=False, flush_interval_s=0.05,
    )  # fmt: skip
    assert run_generate(config).exit_code == 0
    return out


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _one_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unexpected" not in lines[0] and "Traceback" not in result.output, lines
    return lines[0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_to_a_full_disk_is_one_line_with_the_fix(job: Path, small_disk: Path, fmt: str) -> None:
    target = small_disk / ("out.jsonl" if fmt in ("specforge", "speculators") else "out")
    line = _one_line(_cli("export", str(job), "--format", fmt, "--to", str(target)))
    assert line.startswith("error: --to: the disk holding ") and "is full" in line, line
    assert str(small_disk) in line and "free space, or pass --to" in line
    assert not list(small_disk.rglob("*.tmp"))  # nothing half-written left to fill it


@pytest.fixture
def read_only_job(job: Path, archive_disk: Path) -> Iterator[Path]:
    """The finished job (its ledger closed) copied onto a disk then remounted read-only."""
    shutil.copytree(job, archive_disk / "job")
    _mount(["-o", "remount,ro", str(archive_disk)])
    yield archive_disk / "job"


def test_report_and_view_read_a_job_on_a_read_only_disk(read_only_job: Path) -> None:
    result = _cli("report", str(read_only_job), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["done"] == 40
    from specpilot.status.ledger_view import read_snapshot

    assert read_snapshot(read_only_job).summary.done == 40


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_from_a_read_only_disk_names_to(read_only_job: Path, tmp_path: Path, fmt: str) -> None:
    line = _one_line(_cli("export", str(read_only_job), "--format", fmt))
    assert "is not writable" in line and "Read-only file system" in line, line
    assert "pass --to a writable path" in line and "restore" not in line
    elsewhere = tmp_path / "elsewhere" / fmt
    result = _cli("export", str(read_only_job), "--format", fmt, "--to", str(elsewhere), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 40
