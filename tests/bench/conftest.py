"""Fixtures for bench tests: an isolated home, prompts files, specs whose engine is the
stand-in (tests/fakeengines/standin.py) answering as a batch loop whose speed follows its argv, and running `specpilot bench`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakeengines.standin import config_env
from tests.fixtures.engines import free_port, process_group_members

ROOT = Path(__file__).resolve().parents[2]
BENCH_ENGINE = ROOT / "tests" / "fakeengines" / "standin.py"
#: a real Qwen3.6-27B config (hybrid, with an MTP head): plan gives each variant its own room
MODEL_CONFIG = ROOT / "examples" / "models" / "qwen3.6-27b" / "config.json"
SPECULATIVE_ARGS = [
    "--context-length", "32768",
    "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--mamba-scheduler-strategy", "extra_buffer",
]  # fmt: skip
BENCH_TIMEOUT_S = 240


@pytest.fixture
def run_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "state"))
    return home


def write_prompts(path: Path, rows: int) -> Path:
    """Prompts of very different lengths (a long tail), ids q0..q{rows-1}."""
    with path.open("w") as handle:
        for i in range(rows):
            words = 1 + (i * 37) % 200 + (2000 if i % 50 == 7 else 0)
            handle.write(json.dumps({"id": f"q{i}", "prompt": "word " * words}) + "\n")
    return path


SpecFactory = Callable[..., Path]


def stand_in_python() -> str:
    """The interpreter running the tests, as its own path: in a virtualenv that is the venv's
    `bin/python` link, whose packages (aiohttp) the stand-in needs; resolving the link would
    start the base interpreter without them (the suite failed in a venv). The live argv is
    still the planned one: exec keeps the path it was given."""
    return sys.executable


@pytest.fixture
def bench_spec(tmp_path: Path, run_home: Path) -> SpecFactory:
    """A spec file whose engine is the bench stand-in with per-draft-token `profiles`."""

    def make(
        profiles: dict[str, dict[str, object]],
        *,
        args: list[str] | None = None,
        name: str = "qb",
        host: str = "local",
    ) -> Path:
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        shutil.copy(MODEL_CONFIG, model / "config.json")
        env = {"SGLANG_ENABLE_SPEC_V2": "1", **config_env(answers="batch", profiles=profiles)}
        python = stand_in_python()
        text = f"""name = "{name}"
[model]
path = "model"
served_name = "fake-model"
[gpu]
name = "stand-in"
memory_gib = 95.6
[engine]
name = "sglang"
version = "0.5.13"
command = {json.dumps([python, str(BENCH_ENGINE)])}
args = {json.dumps(SPECULATIVE_ARGS if args is None else args)}
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}
[server]
port = {free_port()}
ready_timeout_s = 15
[host]
target = "{host}"
"""
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        return path

    return make


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def specpilot(*argv: str | Path, timeout_s: float = BENCH_TIMEOUT_S) -> Ran:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "160"}
    done = subprocess.run(
        [sys.executable, "-m", "specpilot", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def live_runs(state_home: Path) -> dict[str, list[int]]:
    """Every run this home started -> the live members of its process group."""
    found = {}
    for state_file in (state_home / "runs").glob("*/state.json"):
        state = json.loads(state_file.read_text())
        found[state["name"]] = process_group_members(int(state["pgid"]))
    return found
