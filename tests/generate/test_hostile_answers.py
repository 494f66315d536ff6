"""Answers a server should not give, each kept out of the data with a clear word: a token count
past any context (10**20 once crashed the ledger and every resume), no finish_reason (the
answer may be cut: flagged, not clean), and no `usage` (0 tokens recorded: said once)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from specpilot.generate.dispatch.client import RequestFailed, parse_answer
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import read_output, scripted_server, write_jsonl


def _answer(prompt: str) -> dict[str, object]:
    choice: dict[str, object] = {
        "message": {"role": "assistant", "content": f"answer to {prompt}", "reasoning_content": "r"},
        "finish_reason": None if "NOFINISH" in prompt else "stop",
    }
    body: dict[str, object] = {"choices": [choice]}
    if "NOUSAGE" not in prompt:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": 10**20 if "HUGE" in prompt else 4}
    return body


async def _chat(request: web.Request) -> web.Response:
    prompt = (await request.json())["messages"][-1]["content"]
    return web.json_response(_answer(prompt))


def test_a_token_count_past_any_context_is_a_malformed_answer() -> None:
    with pytest.raises(RequestFailed, match=r"completion_tokens is 10+, more tokens than any answer holds"):
        parse_answer(json.dumps(_answer("HUGE")).encode())
    assert parse_answer(json.dumps(_answer("fine")).encode()).completion_tokens == 4


@pytest.mark.parametrize("usage", [{}, {"prompt_tokens": 3}, {"prompt_tokens": 3, "completion_tokens": None}])
def test_a_usage_without_a_completion_count_is_said_as_no_usage(usage: dict[str, object]) -> None:
    """`"usage": {}` recorded 0 tokens silently: only an absent `usage` was warned of."""
    assert parse_answer(json.dumps({**_answer("NOUSAGE"), "usage": usage}).encode()).usage_missing
    assert not parse_answer(json.dumps(_answer("fine")).encode()).usage_missing


def test_hostile_answers_fail_flag_or_warn_and_the_job_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = ["fine", "HUGE count", "NOFINISH here", "NOUSAGE one", "NOUSAGE two"]
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": p} for i, p in enumerate(prompts)])
    said: list[str] = []
    with scripted_server(_chat) as port:

        def config() -> JobConfig:
            return JobConfig(
                inputs, tmp_path / "out", [Endpoint(f"http://127.0.0.1:{port}")], "m", Sampling(True),
                max_attempts=2, retry_base_s=0.0, progress_interval_s=0.0, notify=said.append,
            )  # fmt: skip

        first = run_generate(config())
        again = run_generate(config())  # the resume reads the same ledger back
    assert first.exit_code == 1 and again.exit_code == 1, (first.message, again.message)
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["id"] for e in errors] == ["r1"] and "more tokens than any answer holds" in errors[0]["error"]
    assert sorted(row["id"] for row in read_output(tmp_path / "out")) == ["r0", "r3", "r4"]
    flagged = [
        line
        for part in sorted((tmp_path / "out" / "flagged").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    (row,) = [json.loads(line) for line in flagged]
    assert row["id"] == "r2" and row["meta"]["flags"] == ["no_finish_reason"]
    printed = capsys.readouterr()
    warnings = [line for line in (printed.out + printed.err).splitlines() if "without `usage`" in line]
    assert len(warnings) == 1 and "0 prompt and completion tokens" in warnings[0]


def test_rows_a_broken_server_answered_with_huge_counts_are_generated_on_a_resume(tmp_path: Path) -> None:
    """Their answers were malformed, the server's fault, not theirs: a resume on a good server
    sends them again (once, they stayed failed until --retry-failed and the dataset lacked them)."""
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": f"HUGE {i}"} for i in range(6)])
    said: list[str] = []

    def config(port: int) -> JobConfig:
        return JobConfig(
            inputs, tmp_path / "out", [Endpoint(f"http://127.0.0.1:{port}")], "m", Sampling(True),
            max_attempts=2, retry_base_s=0.0, progress_interval_s=0.0, notify=said.append,
        )  # fmt: skip

    async def good(request: web.Request) -> web.Response:
        prompt = (await request.json())["messages"][-1]["content"]
        return web.json_response(_answer(prompt.replace("HUGE", "fine")))

    with scripted_server(_chat) as port:
        broken = run_generate(config(port))
    assert broken.exit_code == 1 and broken.summary.failed == 6, broken.message
    with scripted_server(good) as port:
        resumed = run_generate(config(port))
    assert resumed.exit_code == 0, resumed.message
    assert sorted(row["id"] for row in read_output(tmp_path / "out")) == [f"r{i}" for i in range(6)]
    assert any("6 rows failed on a malformed answer" in line for line in said), said
