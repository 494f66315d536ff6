"""The export formats are one registry: the CLI, the job file and the export itself read it,
and a new format is one record and its writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.export import formats, run
from specpilot.export.formats import FORMATS, ExportFormat, format_named
from specpilot.export.writing import WriteRequest, Written
from specpilot.generate.writers.committed import committed_parts
from specpilot.job.spec import load_job
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.test_job import _config


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    server = StandIn().start()
    try:
        assert run_generate(_config(folder, [server], 3)).exit_code == 0
    finally:
        server.close()
    return folder / "out"


def write_ids(request: WriteRequest) -> Written:
    """A writer for a format the registry does not ship: one id a line."""
    ids = [row["id"] for _, _, rows in committed_parts(request.directory, request.splits) for row in rows]
    request.target.write_text("".join(f"{i}\n" for i in ids))
    request.done(len(ids))
    return Written([request.target], len(ids))


def test_every_writer_loads() -> None:
    for fmt in FORMATS.values():
        assert callable(fmt.load_writer()), fmt.name


def test_a_new_format_is_one_record_and_its_writer(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = ExportFormat("ids", "ids.txt", "one id a line", owns=None, writer=f"{__name__}:write_ids")
    monkeypatch.setitem(FORMATS, "ids", ids)
    result = run.export(job, "ids")
    assert result.files == [job / "ids.txt"] and result.rows == 3
    assert len((job / "ids.txt").read_text().splitlines()) == 3
    assert "ids: one id a line" in formats.format_help() and "DIR/ids.txt" in formats.target_help()
    with pytest.raises(UserError, match="already exists"):  # its target is guarded as any other's
        run.export(job, "ids")


def test_an_unknown_format_names_the_known_ones(job: Path) -> None:
    with pytest.raises(UserError) as refused:
        format_named("csv", field="--format")
    assert str(refused.value) == "--format: unknown format 'csv' (use specforge, speculators, parquet, hf)"
    with pytest.raises(UserError) as refused:
        run.export(job, "csv")
    assert "unknown format 'csv'" in str(refused.value)


def test_the_job_file_reads_the_registry(tmp_path: Path) -> None:
    (tmp_path / "server.toml").write_text("")
    (tmp_path / "prompts.jsonl").write_text("")
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        '[job]\nserver = "server.toml"\nprompts = "prompts.jsonl"\noutput = "out"\nexport = ["csv"]\n'
    )
    with pytest.raises(UserError) as refused:
        load_job(job_file)
    assert (
        str(refused.value) == "[job] export: unknown format 'csv' (use specforge, speculators, parquet, hf)"
    )


def test_the_cli_offers_the_registry() -> None:
    shown = CliRunner().invoke(cli, ["export", "--help"], terminal_width=400)
    assert "[specforge|speculators|parquet|hf]" in shown.output
    refused = CliRunner().invoke(cli, ["export", "out", "--format", "csv"])
    assert refused.exit_code == 2 and "'csv' is not one of 'specforge', 'speculators', 'parquet', 'hf'" in (
        refused.output
    )


@pytest.mark.parametrize("flag", ["--per-turn", "--whole-conversations"])
@pytest.mark.parametrize("fmt", [f.name for f in FORMATS.values() if not f.splits_turns])
def test_turn_flags_only_for_formats_that_split_turns(job: Path, fmt: str, flag: str) -> None:
    refused = CliRunner().invoke(cli, ["export", str(job), "--format", fmt, flag])
    assert refused.exit_code == 2 and f"{flag} applies to --format specforge only" in refused.output


def test_the_json_names_per_turn_only_for_formats_that_split_turns(job: Path, tmp_path: Path) -> None:
    for fmt in FORMATS.values():
        shown = CliRunner().invoke(
            cli, ["export", str(job), "--format", fmt.name, "--to", str(tmp_path / fmt.name), "--json"]
        )
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["per_turn"] is fmt.splits_turns
