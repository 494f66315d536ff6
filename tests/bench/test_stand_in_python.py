"""The bench stand-in runs under the tests' own interpreter path, venv link included.

In a virtualenv `sys.executable` is `venv/bin/python`, a link to the base interpreter;
resolving it started the stand-in without the venv's packages ("No module named 'aiohttp'",
8 bench tests failed inside a venv, never in CI, which runs outside one).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from tests.bench.conftest import SpecFactory


def test_the_stand_in_is_started_by_the_venv_link_not_its_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bench_spec: SpecFactory
) -> None:
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(venv_python))
    spec = tomllib.loads(bench_spec({"0": {}}).read_text())
    assert spec["engine"]["command"][0] == str(venv_python)
