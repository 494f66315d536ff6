"""A typo in `plan`'s or `check`'s own options gets click's suggestion, as every other command's
does, instead of being read as the start of a launch command."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "qwen3-8b-vllm.toml")


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["plan", "--gpu-memroy-gib", "95", EXAMPLE], "Did you mean '--gpu-memory-gib'?"),
        (["check", "--fx", EXAMPLE], "Did you mean '--fix'?"),
        (["check", EXAMPLE, "--jsn"], "Did you mean '--json'?"),
    ],
)
def test_a_mistyped_option_is_suggested(argv: list[str], suggestion: str) -> None:
    out = CliRunner().invoke(cli, argv)
    assert out.exit_code == 2, out.output
    assert f"No such option: {argv[1] if argv[1].startswith('-') else argv[2]}" in out.output
    assert suggestion in out.output
    assert "cannot tell the engine" not in out.output


def test_a_launch_command_without_the_separator_is_told_where_it_goes() -> None:
    out = CliRunner().invoke(cli, ["check", "python", "-m", "sglang.launch_server", "--model-path", "x"])
    assert out.exit_code == 2
    assert "No such option: -m (a pasted launch command goes after --)" in out.output


def test_options_of_the_pasted_command_pass_through_after_the_separator() -> None:
    out = CliRunner().invoke(
        cli, ["plan", "--gpu-memory-gib", "95.6", "--", "vllm", "serve", "--no-such-engine-flag", "1"]
    )
    assert "No such option" not in out.output


def test_a_mistyped_spec_file_is_named_with_the_nearest_spec(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text("")
    out = CliRunner().invoke(cli, ["plan", str(tmp_path / "spec.tom")])
    assert out.exit_code == 2
    assert f"{tmp_path / 'spec.tom'}: no such spec file (did you mean {tmp_path / 'spec.toml'}?" in out.output


def test_a_command_pasted_as_one_string_is_still_a_command() -> None:
    out = CliRunner().invoke(
        cli, ["plan", "--gpu-memory-gib", "95.6", "python -m sglang.launch_server --model-path M --tp 1"]
    )
    assert "no such spec file" not in out.output
    assert "[model] path" in out.output  # it got as far as reading the model
