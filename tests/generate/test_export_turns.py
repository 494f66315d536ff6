"""The per-turn SpecForge export and its bad inputs: one line with the fix, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.export import jsonl
from specpilot.export.jsonl import specforge_records
from specpilot.generate.rows.output import turn_rows
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.test_job import _config

MULTI = {
    "id": "m",
    "conversations": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "given"},
        {"role": "user", "content": "second"},
    ],
}


@pytest.fixture
def job(tmp_path: Path) -> Path:
    server = StandIn().start()
    rows = [MULTI, {"id": "s", "prompt": "single"}, {"id": "t", "prompt": "third"}]
    try:
        assert (
            run_generate(_config(tmp_path, [server], 0, input_rows=rows, model="Qwen/Qwen3.6-27B")).exit_code
            == 0
        )
    finally:
        server.close()
    return tmp_path / "out"


def _exported(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_target_turn_is_a_row_ending_with_it(job: Path) -> None:
    result = CliRunner().invoke(cli, ["export", str(job), "--format", "specforge", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 4 and json.loads(result.stdout)["per_turn"] is True
    rows = {r["id"]: r for r in _exported(job / "specforge.jsonl")}
    assert set(rows) == {"m#1", "m#3", "s#1", "t#1"}
    first, second = rows["m#1"]["conversations"], rows["m#3"]["conversations"]
    assert [t["content"] for t in first] == ["first", "answer: first"]
    assert [t["content"] for t in second] == ["first", "answer: first", "second", "answer: second"]
    assert second[1]["reasoning_content"] == "thinking about first"  # history as stored


def test_whole_conversations_keep_one_row_each(job: Path) -> None:
    args = ["export", str(job), "--format", "specforge", "--whole-conversations", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and json.loads(result.stdout)["per_turn"] is False
    assert {r["id"] for r in _exported(job / "specforge.jsonl")} == {"m", "s", "t"}


def test_per_turn_is_refused_for_other_formats(job: Path) -> None:
    result = CliRunner().invoke(cli, ["export", str(job), "--format", "parquet", "--per-turn"])
    assert result.exit_code == 2 and "--per-turn applies to --format specforge only" in result.output
    assert not (job / "parquet").exists()


def test_a_row_without_target_turns_is_refused_and_nothing_is_left(
    job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a row that records no target turns, met after rows already written to the file
    monkeypatch.setattr(jsonl, "turn_rows", lambda row: [] if row["id"] == "t" else turn_rows(row))
    result = CliRunner().invoke(cli, ["export", str(job), "--format", "specforge"])
    assert result.exit_code == 2
    assert "row 't' has no meta.target_turns" in result.output and "--whole-conversations" in result.output
    assert not list(job.glob("specforge.jsonl*"))  # neither the file nor its .tmp


def test_specforge_records_name_the_field() -> None:
    with pytest.raises(UserError) as err:
        specforge_records(True)({"id": "x", "conversations": [{"role": "user", "content": "q"}]})
    assert err.value.field == "--per-turn"


def test_an_unknown_chat_template_is_refused_before_anything_is_written(job: Path) -> None:
    result = CliRunner().invoke(
        cli, ["export", str(job), "--format", "specforge", "--chat-template", "qwen-3.5"]
    )
    assert result.exit_code == 2 and "SpecForge has no chat template 'qwen-3.5'" in result.output
    assert not (job / "specforge.jsonl").exists()
