"""The prompt row shapes `generate --help` shows are the shapes the reader accepts; others say how to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.generate.rows.inputs import iter_rows, resolve_input
from specpilot.generate.rows.types import PromptRow

#: help label -> the messages before each target turn the row must become
EXPECTED = {
    "plain prompt": [[{"role": "user", "content": "What is 2 + 2?"}]],
    "OpenAI messages": [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}],
    ],
    "ShareGPT": [[{"role": "user", "content": "Write a haiku about GPUs."}]],
    # the given "7" only marks where the target's first answer goes
    "multi-turn": [
        [{"role": "user", "content": "Pick a number."}],
        [{"role": "user", "content": "Why that one?"}],
    ],
}


def help_examples() -> dict[str, str]:
    """label -> the example row printed under it in `specpilot generate --help`."""
    lines = CliRunner().invoke(cli, ["generate", "--help"]).output.splitlines()
    examples = {}
    for index, line in enumerate(lines):
        label = line.strip().split(" (")[0].rstrip(":")
        if label in EXPECTED and line.strip().endswith(":"):
            examples[label] = lines[index + 1].strip()
    return examples


def test_every_row_shape_in_the_help_parses_to_its_messages(tmp_path: Path) -> None:
    examples = help_examples()
    assert set(examples) == set(EXPECTED)
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(examples[label] + "\n" for label in EXPECTED))
    rows = list(iter_rows(resolve_input(path)))
    for row, label in zip(rows, EXPECTED, strict=True):
        assert isinstance(row, PromptRow), row
        assert [[dict(m) for m in segment] for segment in row.segments] == EXPECTED[label], label


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("prompts.csv", "id,prompt\nq1,hi\n", ("prompts.csv", "unknown prompt file format '.csv'", "--help")),
        (
            "prompts.jsonl",
            json.dumps([{"prompt": "hi"}], indent=2),
            ("prompts.jsonl", "one JSON array", "name it .json", "jq -c"),
        ),
        # the row itself is rejected on its own line (alpaca.jsonl:1); the error is that none is left
        (
            "alpaca.jsonl",
            json.dumps({"instruction": "hi"}) + "\n",
            ("alpaca.jsonl", "no usable rows", "--help"),
        ),
    ],
)
def test_unknown_format_is_one_line_naming_the_file_and_the_fix(
    tmp_path: Path, name: str, content: str, words: tuple[str, ...]
) -> None:
    path = tmp_path / name
    path.write_text(content)
    result = CliRunner().invoke(
        cli, ["generate", "--input", str(path), "--output", str(tmp_path / "out"), "--server",
              "http://127.0.0.1:1", "--model", "m", "--max-attempts", "1", "--give-up-after-s", "1"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output
    for word in words:
        assert word in errors[0], result.output
    if name == "alpaca.jsonl":
        assert "rejected " in result.output
        assert "alpaca.jsonl:1: row has none of conversations, messages, prompt (it has instruction)" in (
            result.output
        )


def test_unknown_suffix_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "prompts.txt"
    path.write_text('{"prompt": "hi"}\n')
    with pytest.raises(UserError, match="unknown prompt file format"):
        resolve_input(path)
