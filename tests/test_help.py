"""Every command's `--help` shows an example: the fastest way to learn a command is to copy one."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.cli.commands import COMMANDS


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in COMMANDS)], ids=str)
def test_help_shows_an_example(argv: list[str]) -> None:
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, result.output
    # the example is for this command: it names it as a user would type it
    assert f"specpilot {argv[0]}" in result.output or argv == ["--help"], result.output
