"""Servers that answer 200 with the wrong shape, bugs inside a request task, lost shards.

Each wrong shape once made `generate` hang for ever (the row stayed "in flight", the
request timeout never fired, SIGTERM only waited for it). Now a wrong shape is a
retryable "malformed response": the rows fail after their attempts and the job ends.
The stand-in server (tests/fakeengines/standin.py) answers each shape on 127.0.0.1; the job runs as a real
process with a bounded wait, so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from specpilot.errors import UserError
from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from specpilot.taskgroup import TaskFailed
from tests.fakeengines.standin import Config, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

JOB_WAIT_S = 60


def _chat(message: Any, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"message": message, "finish_reason": "stop"}], **extra}


#: (name, body the server answers with status 200: JSON-able, or raw bytes)
WRONG_SHAPES: list[tuple[str, Any]] = [
    ("message is a string", _chat("hello")),
    ("usage is a string", _chat({"content": "hi"}, usage="lots")),
    ("completion_tokens is a string", _chat({"content": "hi"}, usage={"completion_tokens": "many"})),
    ("content is a number", _chat({"content": 5})),
    ("reasoning_content is a list", _chat({"content": "hi", "reasoning_content": ["a"]})),
    ("choices is empty", {"choices": []}),
    ("body is a list", [1, 2]),
    ("prompt_tokens is negative", _chat({"content": "hi"}, usage={"prompt_tokens": -3})),
    ("body nested thousands deep", b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("body is not JSON", b"<html>bad gateway</html>"),
]


def _answering(body: Any) -> StandIn:
    """The stand-in answering every chat request with `body` (its model: "m")."""

    async def chat(request: web.Request) -> web.Response:
        if isinstance(body, bytes):  # a body json.dumps could not write
            return web.Response(body=body, content_type="application/json")
        return web.json_response(body)

    return StandIn(config=Config(answers="echo", served_name="m"), routes={"/v1/chat/completions": chat})


def _generate(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    inputs = tmp_path / "in.jsonl"
    if not inputs.exists():
        write_jsonl(inputs, prompt_rows(3))
    argv = [sys.executable, "-m", "specpilot", "generate", "--input", str(inputs),
            "--output", str(tmp_path / "out"), "--server", url, "--model", "m",
            "--max-attempts", "2", "--retry-base-s", "0", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=JOB_WAIT_S, env=env)


def _states(out: Path) -> list[int]:
    with sqlite3.connect(out / "ledger.sqlite") as db:
        return [state for (state,) in db.execute("SELECT state FROM rows ORDER BY position")]


@pytest.mark.parametrize(("name", "body"), WRONG_SHAPES, ids=[name for name, _ in WRONG_SHAPES])
def test_wrong_answer_shape_fails_the_rows_and_ends(tmp_path: Path, name: str, body: Any) -> None:
    with _answering(body) as server:
        result = _generate(tmp_path, server.url)
    assert result.returncode == 1, result.stderr
    assert "3 rows failed after all retries" in result.stderr
    assert "Traceback" not in result.stderr and "never retrieved" not in result.stderr
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["attempts"] for e in errors] == [2, 2, 2]
    assert all(e["error"].startswith("malformed response") for e in errors)
    assert _states(tmp_path / "out") == [3, 3, 3]  # failed, none left in flight


def test_a_bug_in_a_request_task_ends_the_job_and_strands_no_row(
    tmp_path: Path, fake_server: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception the dispatcher did not expect ends the job with it, at once."""
    config = JobConfig(
        write_jsonl(tmp_path / "in.jsonl", prompt_rows(20)),
        tmp_path / "out",
        [Endpoint(fake_server.url)],
        "m",
        Sampling(True),
        concurrency=4,
        show_progress=False,
        flush_interval_s=0.05,
    )
    original = Dispatcher._on_answer
    answers = 0

    def sometimes_broken(self: Dispatcher, *args: Any) -> None:
        nonlocal answers
        answers += 1
        if answers == 5:
            raise RuntimeError("bug in the answer path")
        original(self, *args)

    monkeypatch.setattr(Dispatcher, "_on_answer", sometimes_broken)
    with pytest.raises(
        TaskFailed, match=r"the request task for row q\d+ failed: RuntimeError: bug in the answer path"
    ):
        run_generate(config)
    assert answers < 20  # it stopped, rather than running on past the error
    monkeypatch.setattr(Dispatcher, "_on_answer", original)
    outcome = run_generate(config)
    assert (outcome.exit_code, outcome.message) == (0, "all 20 rows done")
    ids = [row["id"] for row in read_output(tmp_path / "out")]
    assert sorted(ids) == sorted(f"q{i}" for i in range(20))


def test_debug_shows_the_task_error_traceback(tmp_path: Path, fake_server: StandIn) -> None:
    """The CLI path: one line without --debug, the task's traceback with it."""
    line = (
        r"error: the request task for row q[01] failed: RuntimeError: bug in the answer path "
        r"\(specpilot bug, rerun with --debug for the traceback\)\n"
    )
    write_jsonl(tmp_path / "in.jsonl", prompt_rows(2))
    sitecustomize = tmp_path / "inject" / "sitecustomize.py"
    sitecustomize.parent.mkdir()
    sitecustomize.write_text(
        "from specpilot.generate.dispatch.dispatcher import Dispatcher\n"
        "def broken(self, *args):\n"
        "    raise RuntimeError('bug in the answer path')\n"
        "Dispatcher._on_answer = broken\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(sitecustomize.parent), *sys.path])}
    argv = [sys.executable, "-m", "specpilot", "generate", "--input", str(tmp_path / "in.jsonl"),
            "--output", str(tmp_path / "out"), "--server", fake_server.url, "--model", "m"]  # fmt: skip
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=JOB_WAIT_S, env=env)
    assert plain.returncode == 1
    assert re.fullmatch(line, plain.stderr), plain.stderr
    debug = subprocess.run(
        [*argv[:3], "--debug", *argv[3:]], capture_output=True, text=True, timeout=JOB_WAIT_S, env=env
    )
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "in broken" in debug.stderr
    assert re.search(line, debug.stderr), debug.stderr
    assert "never retrieved" not in debug.stderr


@pytest.fixture
def finished_job(tmp_path: Path, fake_server: StandIn) -> Iterator[JobConfig]:
    config = JobConfig(
        write_jsonl(tmp_path / "in.jsonl", prompt_rows(30)),
        tmp_path / "out",
        [Endpoint(fake_server.url)],
        "m",
        Sampling(True),
        rows_per_part=10,
        show_progress=False,
        flush_interval_s=0.05,
    )
    assert run_generate(config).exit_code == 0
    yield config


def _cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    ("damage", "requeued"),
    [(lambda p: p.unlink(), 10), (_cut_in_half, None)],
    ids=["shard deleted", "shard cut in half"],
)
def test_a_lost_shard_is_requeued_and_said(
    finished_job: JobConfig, capsys: pytest.CaptureFixture[str], damage: Any, requeued: int | None
) -> None:
    shard = finished_job.output_dir / "data" / "part-00001.jsonl"
    damage(shard)
    outcome = run_generate(finished_job)
    said = capsys.readouterr().err
    assert "part-00001.jsonl" in said and "lost rows since the last run" in said
    if requeued is not None:
        assert f"{requeued} rows are queued to be generated again" in said
    assert (outcome.exit_code, outcome.message) == (0, "all 30 rows done")
    ids = [row["id"] for row in read_output(finished_job.output_dir)]
    assert sorted(ids) == sorted(f"q{i}" for i in range(30))
    assert outcome.summary.done == 30


def test_full_disk_keeps_every_row_for_the_resume(tmp_path: Path, fake_server: StandIn) -> None:
    """Writes fail with ENOSPC (the shard is /dev/full); after "freeing space" every row comes once."""
    config = JobConfig(
        write_jsonl(tmp_path / "in.jsonl", prompt_rows(12)),
        tmp_path / "out",
        [Endpoint(fake_server.url)],
        "m",
        Sampling(True),
        show_progress=False,
        flush_interval_s=0.05,
    )
    shard = tmp_path / "out" / "data" / "part-00000.jsonl"
    shard.parent.mkdir(parents=True)
    shard.symlink_to("/dev/full")
    with pytest.raises(UserError, match="is full"):
        run_generate(config)
    shard.unlink()
    outcome = run_generate(config)
    assert (outcome.exit_code, outcome.message) == (0, "all 12 rows done")
    ids = [row["id"] for row in read_output(tmp_path / "out")]
    assert sorted(ids) == sorted(f"q{i}" for i in range(12))
