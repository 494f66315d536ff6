"""`specpilot view` and `--serve-status`: bad input is one line and exit 2; the view never writes."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.status.server import bind
from tests.fixtures.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def _folder_state(directory: Path) -> dict[str, tuple[int, str]]:
    """Every path under the folder with its mtime and content hash, and the folder's own mtime."""
    state = {".": (directory.stat().st_mtime_ns, "")}
    for path in sorted(directory.rglob("*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        state[str(path.relative_to(directory))] = (path.stat().st_mtime_ns, digest)
    return state


@contextlib.contextmanager
def _view_process(directory: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    argv = [sys.executable, "-m", "specpilot", "view", str(directory), "--addr", f"127.0.0.1:{port}"]
    process = subprocess.Popen(argv, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        process.terminate()
        process.communicate(timeout=10)


def _get(url: str, deadline_s: float = 20.0) -> str:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_view_serves_a_finished_job_and_leaves_its_folder_untouched(finished_job: Path) -> None:
    before = _folder_state(finished_job)
    assert not any(name.endswith(("-wal", "-shm")) for name in before)
    port = free_port()
    with _view_process(finished_job, port):
        page = _get(f"http://127.0.0.1:{port}/")
        metrics = _get(f"http://127.0.0.1:{port}/metrics")
    assert '<td class="n" id="rows-done">40</td>' in page
    assert "specpilot_rows_done_total 40.0" in metrics
    assert _folder_state(finished_job) == before


def _run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_a_folder_that_is_not_a_job(tmp_path: Path) -> None:
    code, output = _run_cli("view", str(tmp_path))
    assert code == 2 and output.count("\n") == 1
    assert "is not a generate job" in output and "--output directory" in output
    (tmp_path / "ledger.sqlite").write_text("not a database")
    code, output = _run_cli("view", str(tmp_path))
    assert code == 2 and "is not a specpilot ledger" in output and output.count("\n") == 1


def test_a_ledger_locked_by_a_writer_is_refused_in_one_line(finished_job: Path) -> None:
    writer = sqlite3.connect(finished_job / "ledger.sqlite", isolation_level=None)
    try:
        # EXCLUSIVE locking mode keeps WAL readers out (https://sqlite.org/wal.html#noshm)
        writer.execute("PRAGMA locking_mode=EXCLUSIVE")
        writer.execute("UPDATE meta SET value = value WHERE key = 'total'")
        code, output = _run_cli("view", str(finished_job))
    finally:
        writer.close()
    assert code == 2 and output.count("\n") == 1
    assert "is locked by a writer" in output and "wait for that process" in output


def test_an_address_in_use_is_refused_before_anything_runs(finished_job: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, output = _run_cli("view", str(finished_job), "--addr", f"127.0.0.1:{port}")
        assert code == 2 and output.count("\n") == 1
        assert f"127.0.0.1:{port} is already in use" in output and f"127.0.0.1:{port + 1}" in output
        out = tmp_path / "new-job"
        code, output = _run_cli(
            "generate", "--input", str(tmp_path / "in.jsonl"), "--output", str(out),
            "--server", "http://127.0.0.1:9", "--serve-status", f"127.0.0.1:{port}",
        )  # fmt: skip
    assert code == 2 and "already in use" in output and "--serve-status" in output
    assert not out.exists()


def test_only_loopback_unless_asked_and_then_a_warning(
    finished_job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = _run_cli("view", str(finished_job), "--addr", "0.0.0.0:0")
    assert code == 2 and "--status-public" in output and output.count("\n") == 1
    sock = bind("0.0.0.0:0", public=True, flag="--addr")
    sock.close()
    assert "warning: serving job status on 0.0.0.0" in capsys.readouterr().err
    code, output = _run_cli("view", str(finished_job), "--addr", "nonsense:port")
    assert code == 2 and "is not an address" in output


def test_serve_status_without_a_value_means_the_default_address() -> None:
    from specpilot.cli.generate import generate

    base = ["--input", "in.jsonl", "--output", "out", "--server", "http://127.0.0.1:9"]
    parsed = generate.make_context("generate", [*base, "--serve-status", "--json"]).params
    # `--json` is read as the flag (the sink in JSON form), not as --serve-status's value
    assert parsed["serve_status"] == "127.0.0.1:8765" and parsed["out"]._json is True
    parsed = generate.make_context("generate", [*base, "--serve-status", "127.0.0.1:9100"]).params
    assert parsed["serve_status"] == "127.0.0.1:9100"
    assert generate.make_context("generate", base).params["serve_status"] is None
