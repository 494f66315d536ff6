"""export never replaces an earlier export silently, says the SpecForge template only for
SpecForge's format, and off a terminal says the rows it has written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, write_jsonl


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A finished job of an unknown model (SpecForge has no template for it: a warning)."""
    server = StandIn().start()
    try:
        config = JobConfig(
            input_path=write_jsonl(tmp_path / "in.jsonl", prompt_rows(5)),
            output_dir=tmp_path / "out",
            endpoints=[Endpoint(base_url=server.url)],
            model="some-org/unknown-model",
            sampling=Sampling(True),
            show_progress=False,
        )
        assert run_generate(config).exit_code == 0
    finally:
        server.close()
    return tmp_path / "out"


def export(*args: str) -> Result:
    return CliRunner().invoke(cli, ["export", *args], catch_exceptions=False)


@pytest.mark.parametrize("fmt", ["specforge", "parquet", "hf"])
def test_an_earlier_export_is_replaced_only_with_overwrite(job: Path, fmt: str) -> None:
    first = export(str(job), "--format", fmt, "--json")
    assert first.exit_code == 0, first.output
    files = json.loads(first.stdout)["files"]
    before = {name: Path(name).read_bytes() for name in files}
    again = export(str(job), "--format", fmt)
    assert again.exit_code == 2
    (line,) = again.stderr.strip().splitlines()
    assert line.endswith("already exists (pass --overwrite to replace it, or give another --to)")
    assert {name: Path(name).read_bytes() for name in files} == before  # nothing touched
    replaced = export(str(job), "--format", fmt, "--overwrite", "--json")
    assert replaced.exit_code == 0 and json.loads(replaced.stdout)["rows"] == 5


def test_the_template_warning_is_for_specforge_only(job: Path) -> None:
    specforge = export(str(job), "--format", "specforge")
    assert "SpecForge template" in specforge.stderr
    for fmt in ("parquet", "hf", "speculators"):
        other = export(str(job), "--format", fmt, "--json")
        assert other.exit_code == 0
        assert "template" not in other.stderr and json.loads(other.stdout)["warnings"] == []
    refused = export(str(job), "--format", "parquet", "--chat-template", "qwen3.5", "--overwrite")
    assert (
        refused.exit_code == 2
        and "--chat-template: applies to --format specforge, not parquet" in refused.stderr
    )


def test_export_off_a_terminal_says_the_rows_written(job: Path) -> None:
    said = export(str(job), "--format", "speculators").stderr.splitlines()
    assert "export speculators: writing (0 s): 5 rows" in said
    # a throttled count can stop at an early part: the last line is the total written
    assert [line for line in said if line.startswith("export speculators: ")][-1] == (
        "export speculators: written (0 s): 5 rows"
    )
