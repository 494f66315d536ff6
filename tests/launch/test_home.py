"""SPECPILOT_HOME that is not a folder (a file, a symlink loop, a symlink to nothing) is one
line naming the variable and exit 2, for every command that reads the run registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli


def _file(tmp: Path) -> Path:
    (tmp / "home").write_text("not a folder")
    return tmp / "home"


def _loop(tmp: Path) -> Path:
    (tmp / "a").symlink_to(tmp / "b")
    (tmp / "b").symlink_to(tmp / "a")
    return tmp / "a"


def _dangling(tmp: Path) -> Path:
    (tmp / "home").symlink_to(tmp / "gone")
    return tmp / "home"


@pytest.mark.parametrize(
    ("make", "said"),
    [(_file, "is a file, not a folder"), (_loop, "cannot be used"), (_dangling, "is a symlink to nothing")],
    ids=["file", "loop", "dangling"],
)
@pytest.mark.parametrize("argv", [["runs"], ["status", "demo"], ["down", "demo"]], ids=" ".join)
def test_a_home_that_is_no_folder_is_one_line(
    make: Callable[[Path], Path], said: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = make(tmp_path)
    monkeypatch.setenv("SPECPILOT_HOME", str(home))
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert (
        line.startswith(f"error: SPECPILOT_HOME: {home} {said}") and "set SPECPILOT_HOME to a folder" in line
    )
