"""Two `up` of one spec at once: the second is refused naming the first, which goes on (once,
the second took the first's start for a dead run, stopped it, and both failed blaming the
port); and a run registry that cannot be written is one line naming SPECPILOT_HOME."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.launch.state import read_state
from tests.bench.test_bench_signals import holding
from tests.launch.conftest import SpecFactory
from tests.launch.test_up_interrupt import ROOT, wait_for


def test_a_second_up_of_a_starting_spec_is_refused_naming_the_first(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    # the first start stays `starting` (its engine hangs after loading) until the test ends it
    make_spec("sglang_hang_after_weights", name="twice", hang_timeout_s=60.0)
    first = subprocess.Popen(
        [sys.executable, "-m", "specpilot", "up", str(tmp_path / "twice.toml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        wait_for(Path(os.environ["SPECPILOT_HOME"]) / "runs" / "twice" / "pid", first)
        token = read_state("twice").run_token or ""
        second = CliRunner().invoke(cli, ["up", str(tmp_path / "twice.toml")], catch_exceptions=False)
        assert second.exit_code == 2, second.output
        (line,) = second.output.strip().splitlines()
        assert (
            f"run 'twice' is being started by another `specpilot up` or `specpilot job` (pid {first.pid})"
            in line
        )
        assert first.poll() is None and holding(token) != []  # the first start and its engine go on
        assert read_state("twice").run_token == token
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=60)
        assert first.returncode == 130, out + err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


@pytest.fixture
def read_only_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """SPECPILOT_HOME on a read-only mount (root writes through file modes)."""
    home = tmp_path / "ro-home"
    home.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(home)], check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    monkeypatch.setenv("SPECPILOT_HOME", str(home))
    try:
        yield home
    finally:
        subprocess.run(["umount", str(home)], check=True, timeout=30)


def test_a_read_only_home_is_one_line_naming_it(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, read_only_home: Path
) -> None:
    make_spec("sglang_ready", name="ro")
    result = CliRunner().invoke(cli, ["up", str(tmp_path / "ro.toml")], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(
        f"error: SPECPILOT_HOME: {read_only_home} cannot be written (Read-only file system)"
    )
    assert "set SPECPILOT_HOME to a folder you can write" in line


def test_a_read_only_home_refuses_a_bench_in_one_line(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path, read_only_home: Path
) -> None:
    """`bench` took its locks in SPECPILOT_HOME with a bare mkdir: 'unexpected OSError'."""
    make_spec("sglang_ready", name="ro")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"id": "q{i}", "prompt": "question {i}"}}\n' for i in range(4)))
    argv = ["bench", str(tmp_path / "ro.toml"), "--prompts", str(prompts), "--job", str(tmp_path / "job")]
    result = CliRunner().invoke(cli, [*argv, "--sample", "4"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(
        f"error: SPECPILOT_HOME: {read_only_home} cannot be written (Read-only file system)"
    )
