"""kill -9 at random moments, resume each time: exactly 20,000 distinct, complete rows at the end.

Half the kills land at random moments (after a random number of further rows, so
they strike mid-job whatever this machine's speed); the other half hunt the moment between a part's
fsync and the ledger commit (the window reconciliation exists for), so resumes really
meet uncommitted rows and torn lines, not only requeued in-flight requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeengines.standin import answer_for, config_env
from tests.fixtures.ports import free_port
from tests.generate.conftest import prompt_rows, write_jsonl

ROWS = 20_000
KILLS = 10
REPO_ROOT = Path(__file__).resolve().parents[2]
STANDIN = REPO_ROOT / "tests" / "fakeengines" / "standin.py"


@pytest.fixture
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    latency_s = getattr(request, "param", 0.0)
    config = {"answers": "echo", "faults": {"latency_s": latency_s}, "served_name": "fake-model"}
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(STANDIN), "--port", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, **config_env(**config)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _answers(f"{url}/health"):
            assert process.poll() is None and time.monotonic() < deadline, "stand-in failed"
            time.sleep(0.05)
        yield url
    finally:
        process.kill()
        process.wait()


def _answers(url: str) -> bool:
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)
    return False


def _generate_argv(path: Path, out: Path, server_url: str, *options: str) -> list[str]:
    """`specpilot generate` as a real process (the tests signal it), JSON summary at the end."""
    return [sys.executable, "-m", "specpilot", "generate", "--input", str(path), "--output", str(out),
            "--server", server_url, *options, "--json"]  # fmt: skip


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path, server_url: str) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS))
    out = tmp_path / "out"
    argv = _generate_argv(
        path, out, server_url, "--concurrency", "64", "--flush-interval-s", "0.05", "--rows-per-part", "3000"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    chooser = random.Random(int(os.environ.get("CRASH_SEED", "1")))
    done_after_kill: list[int] = []
    uncommitted_tails = 0
    for kill in range(KILLS):
        process = subprocess.Popen(
            argv, env=env, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if kill % 2:  # a random moment once a random number of further rows are done
            _wait_for_done(out, _count_state(out, 2) + chooser.randint(200, 1500), 20.0)
            time.sleep(chooser.uniform(0.0, 0.1))
        else:
            _wait_for_uncommitted_tail(out, deadline_s=4.0)
        process.send_signal(signal.SIGKILL)
        process.wait()
        uncommitted_tails += _uncommitted_bytes(out) > 0
        done_after_kill.append(sum(1 for _ in _lines(out)))
    print(f"kills that left rows after the committed bytes: {uncommitted_tails}/{KILLS}")
    final = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-2000:]
    assert json.loads(final.stdout)["done"] == ROWS
    assert done_after_kill[-1] < ROWS, "the kills came too late to test anything"
    seen: set[str] = set()
    for line in _lines(out):
        row = json.loads(line)
        assert row["id"] not in seen, f"duplicate {row['id']}"
        seen.add(row["id"])
        user, answer = row["conversations"]
        assert answer["content"] == answer_for(user["content"])[0]
        assert row["id"] == "q" + user["content"].split()[1]
    assert len(seen) == ROWS


def _uncommitted_bytes(out: Path) -> int:
    """Bytes in the parts beyond what the ledger has committed (0 if it can't tell yet)."""
    try:
        db = sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)
        try:
            (committed,) = db.execute("SELECT COALESCE(SUM(committed_bytes), 0) FROM parts").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return 0
    written = sum(p.stat().st_size for p in (out / "data").glob("part-*.jsonl"))
    return int(written - committed)


def _wait_for_done(out: Path, rows: int, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and _count_state(out, 2) < rows:
        time.sleep(0.01)


def _wait_for_uncommitted_tail(out: Path, deadline_s: float) -> None:
    """Hunt the instant between a part's fsync and the ledger commit (kill lands there)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and _uncommitted_bytes(out) <= 0:
        pass


def _lines(out: Path) -> Iterator[bytes]:
    for part in sorted((out / "data").glob("part-*.jsonl")):
        yield from part.read_bytes().splitlines()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
@pytest.mark.parametrize("server_url", [0.3], indirect=True)
def test_first_signal_lets_requests_in_flight_finish(tmp_path: Path, server_url: str, signum: int) -> None:
    """SIGHUP (the SSH session closed) as Ctrl-C: it killed generate, saying nothing."""
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(120))
    out = tmp_path / "out"
    argv = _generate_argv(path, out, server_url, "--concurrency", "8")
    process = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while _count_state(out, 2) < 8:  # some rows done: the job is in full swing
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stderr
    summary = json.loads(stdout)
    assert f"interrupted by {signal.Signals(signum).name}" in summary["message"]
    assert summary["in_flight"] == 0 and 0 < summary["done"] < 120  # nothing was abandoned
    final = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr
    assert len({json.loads(line)["id"] for line in _lines(out)}) == 120


def _count_state(out: Path, state: int) -> int:
    try:
        db = sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)
        try:
            return int(db.execute("SELECT COUNT(*) FROM rows WHERE state = ?", (state,)).fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("server_url", [0.02], indirect=True)
def test_multi_turn_rows_are_written_once_whole_across_kills(tmp_path: Path, server_url: str) -> None:
    """A row is committed once, with all its turns; turns done before a kill are generated again."""
    rows = [
        {
            "id": f"m{i}",
            "conversations": [
                {"role": "user", "content": f"m{i} first"},
                {"role": "assistant", "content": "given"},
                {"role": "user", "content": f"m{i} second"},
                {"role": "assistant", "content": "given"},
                {"role": "user", "content": f"m{i} third"},
            ],
        }
        for i in range(300)
    ]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"
    argv = _generate_argv(path, out, server_url, "--concurrency", "32", "--flush-interval-s", "0.05")
    for kill in range(3):
        process = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_done(out, 40 * (kill + 1), 30.0)  # rows done, many others between their turns
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert _count_state(out, 2) < 300, "the kills came too late to test anything"
    final = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-2000:]
    written = [json.loads(line) for line in _lines(out)]
    assert sorted(row["id"] for row in written) == sorted(f"m{i}" for i in range(300))
    for row in written:
        turns = row["conversations"]
        assert row["meta"]["target_turns"] == [1, 3, 5]
        for index in (1, 3, 5):
            assert turns[index]["content"] == answer_for(turns[index - 1]["content"])[0]
