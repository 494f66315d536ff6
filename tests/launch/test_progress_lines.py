"""Progress lines off a terminal: a line per new phase and one every PROGRESS_EVERY_S
within a phase, with the elapsed time; a short step says nothing; and `up` and `export`
say their steps on stderr when it is not a terminal (CliRunner's is not)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.hosts.memory import MemoryHost
from specpilot.progress import ProgressLines, ticking
from tests.launch.conftest import SpecFactory


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_a_line_per_new_phase_and_every_interval_within_one() -> None:
    clock, said = Clock(), []
    lines = ProgressLines("up r", every_s=10.0, write=said.append, clock=clock)
    lines.update("starting", "loading")
    clock.now_s += 3
    lines.update("starting", "still loading")  # same phase, 3 s later: nothing new to say
    clock.now_s += 1
    lines.update("weights", "Load weight end")
    clock.now_s += 12
    lines.update("weights", "")
    assert said == [
        "up r: starting (0 s): loading",
        "up r: weights (4 s): Load weight end",
        "up r: weights (16 s)",
    ]


def test_a_blocking_step_ticks_and_a_short_one_is_silent() -> None:
    said: list[str] = []
    two = threading.Event()

    def write(line: str) -> None:
        said.append(line)
        if len(said) >= 2:
            two.set()

    with ticking("demo venv", "building", every_s=0.01, write=write):
        assert two.wait(timeout=30)
    assert said[:2] and all(
        line.startswith("demo venv: building (") and line.endswith(" s)") for line in said
    )
    quiet: list[str] = []
    with ticking("demo spec", "writing", every_s=3600, write=quiet.append):
        pass
    assert quiet == []


def test_up_off_a_terminal_says_each_phase_on_stderr(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, memory_host: MemoryHost
) -> None:
    make_spec("sglang_ready", name="talks")
    started = CliRunner().invoke(cli, ["up", str(tmp_path / "talks.toml"), "--json"], catch_exceptions=False)
    try:
        assert started.exit_code == 0, started.output
        assert json.loads(started.stdout)["phase"] == "ready"  # stdout stays one JSON object
        said = started.stderr.splitlines()
        assert said and all(line.startswith("up talks: ") for line in said)
        phases = [line.split(": ")[1].split(" (")[0] for line in said]
        assert len(set(phases)) > 1 and phases[-1] == "ready", said
    finally:
        CliRunner().invoke(cli, ["down", "talks"])
