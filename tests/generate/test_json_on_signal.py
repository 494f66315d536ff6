"""`generate --json` ended by a signal before its rows are sent or after: stdout holds one JSON
object, {error, fix, exit}, as for any failure under --json. The signal is sent by generate to
itself at that point, so it lands there every run. Before, it printed the command line's
generic 'interrupted' on stderr and nothing on stdout (the dispatcher, which takes a signal
while the rows are sent, ends with the summary object)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakeengines.standin import StandIn
from tests.generate.conftest import prompt_rows, write_jsonl

ROOT = Path(__file__).resolve().parents[2]

#: generate, sending signal argv[2] to itself "before" the rows are listed (as it asks the
#: server for its model) or "after" every row is answered (as it asks for the context)
SIGNALLED = """
import os, sys
where, signum = sys.argv.pop(1), int(sys.argv.pop(1))
import specpilot.generate.job as job
name = "default_model" if where == "before" else "_fix_context_tokens"
original = getattr(job, name)
async def signalled(*args, **kwargs):
    os.kill(os.getpid(), signum)
    return await original(*args, **kwargs)
setattr(job, name, signalled)
from specpilot.cli import cli
cli(sys.argv[1:])
"""


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_signal_outside_the_sending_is_one_json_object(
    fake_server: StandIn, tmp_path: Path, where: str, signum: int
) -> None:
    prompts = write_jsonl(tmp_path / "in.jsonl", prompt_rows(5))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-c", SIGNALLED, where, str(signum), "generate", "--input", str(prompts),
            "--output", str(tmp_path / "out"), "--server", fake_server.url, "--json"]  # fmt: skip
    ended = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert ended.returncode == 130, ended.stderr
    shown = json.loads(ended.stdout)
    assert set(shown) == {"error", "fix", "exit"} and shown["exit"] == 130, shown
    assert "interrupted" in shown["error"] and "same command" in shown["fix"], shown
    [line] = [line for line in ended.stderr.splitlines() if line.startswith("error: ")]
    assert "interrupted" in line, ended.stderr
