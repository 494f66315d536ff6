"""What a driver's kill -9 costs: the rows it had in flight, said on resume and sent again."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.generate.conftest import prompt_rows, write_jsonl
from tests.generate.test_crash import REPO_ROOT, _generate_argv, _wait_for_done, server_url  # noqa: F401

ROWS = 400
CONCURRENCY = 16


def ledger_count(out: Path, state: int) -> int:
    with sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT COUNT(*) FROM rows WHERE state = ?", (state,)).fetchone()[0])


@pytest.mark.parametrize("server_url", [0.2], indirect=True)  # requests that take a while
def test_resume_names_the_rows_in_flight_at_the_kill(tmp_path: Path, server_url: str) -> None:  # noqa: F811
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS))
    out = tmp_path / "out"
    argv = _generate_argv(path, out, server_url, "--concurrency", str(CONCURRENCY))
    process = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_done(out, 50, 60.0)
    process.send_signal(signal.SIGKILL)
    process.wait()
    in_flight = ledger_count(out, 1)
    assert 0 < in_flight <= CONCURRENCY  # what was sent and not committed: at most what was open

    final = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-2000:]
    assert f"the last run stopped with {in_flight} rows in flight; they are sent again" in final.stderr
    assert json.loads(final.stdout)["done"] == ROWS
    with sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True) as db:
        meta = dict(db.execute("SELECT key, value FROM meta"))
    assert meta["resent_in_flight"] == str(in_flight)
