"""Whole jobs against the fault-injecting stand-in server: every row done exactly once."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from specpilot.launch.state import write_state
from tests.fakeengines.standin import CUT_MARKER, FATAL_MARKER, Faults, StandIn, answer_for
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl
from tests.launch.helpers import ready_state

SAMPLING_KEYS = ("thinking", "max_tokens", "temperature", "top_p", "top_k", "request_fields")


def _config(tmp_path: Path, servers: list[StandIn], rows: int, **extra: Any) -> JobConfig:
    path = write_jsonl(tmp_path / "in.jsonl", extra.pop("input_rows", None) or prompt_rows(rows))
    settings: dict[str, Any] = {
        "concurrency": 16,
        "retry_base_s": 0.01,
        "retry_cap_s": 0.05,
        "show_progress": False,
        "flush_interval_s": 0.05,
    }
    settings.update(extra)
    return JobConfig(
        path,
        tmp_path / "out",
        [Endpoint(s.url) for s in servers],
        settings.pop("model", None),
        # the sampling keys (thinking, max_tokens, ...) among the settings make the job's Sampling
        Sampling(**{"thinking": True, **{k: settings.pop(k) for k in SAMPLING_KEYS if k in settings}}),
        **settings,
    )


def _check_exactly_once(out: Path, expected: int, thinking: bool = True) -> list[dict[str, Any]]:
    rows = read_output(out)
    ids = [row["id"] for row in rows]
    assert len(ids) == expected and len(set(ids)) == expected
    for row in rows:
        user, answer = row["conversations"][-2], row["conversations"][-1]
        content, reasoning = answer_for(user["content"])
        assert answer == {
            "role": "assistant",
            "content": content,
            "reasoning_content": reasoning if thinking else "",
        }
        assert row["meta"]["thinking"] is thinking
    return rows


@pytest.mark.parametrize("reasoning_field", ["reasoning_content", "reasoning"])
def test_faults_on_one_server(tmp_path: Path, reasoning_field: str) -> None:
    server = StandIn(
        Faults(
            latency_s=0.002,
            burst_429_every=40,
            error_500_rate=0.05,
            drop_rate=0.03,
            reasoning_field=reasoning_field,
        )
    ).start()
    try:
        outcome = run_generate(_config(tmp_path, [server], 800))
    finally:
        server.close()
    assert outcome.exit_code == 0, outcome.message
    rows = _check_exactly_once(tmp_path / "out", 800)
    assert server.counts.rate_limited and server.counts.errors_500 and server.counts.dropped
    assert outcome.summary.retries > 0 and outcome.summary.failed == 0
    assert outcome.summary.spec_accept_length == pytest.approx(3.5)
    assert rows[0]["meta"]["model"] == "fake-model"  # from /v1/models
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["done"] == 800 and len(manifest["input"]["sha256"]) == 64
    assert (tmp_path / "out" / "errors.jsonl").read_text() == ""


def test_server_that_dies_and_comes_back(tmp_path: Path) -> None:
    # The steady server alone would need ~10 s, so the job needs the flaky one back.
    steady = StandIn(Faults(latency_s=0.05)).start()
    flaky = StandIn(Faults(latency_s=0.005)).start()
    answered_when_stopped: list[int] = []

    def die_then_return() -> None:
        answered_when_stopped.append(flaky.counts.answered)
        flaky.stop()
        threading.Timer(0.8, flaky.start).start()

    threading.Timer(0.4, die_then_return).start()
    try:
        outcome = run_generate(_config(tmp_path, [steady, flaky], 1500, concurrency=4, max_attempts=2))
    finally:
        steady.close()
        flaky.close()
    assert outcome.exit_code == 0, outcome.message
    _check_exactly_once(tmp_path / "out", 1500)
    assert 0 < answered_when_stopped[0] < flaky.counts.answered  # worked, died, rejoined
    assert outcome.summary.this_run_servers is not None
    by_server = {s.server: s for s in outcome.summary.this_run_servers}
    assert by_server[flaky.url.split("://")[1]].taken_out >= 1
    assert sum(s.rows_done for s in by_server.values()) == 1500


def test_all_servers_down_pauses_without_spending_retries(tmp_path: Path) -> None:
    server = StandIn(Faults(latency_s=0.005)).start()
    threading.Timer(0.3, server.stop).start()
    threading.Timer(1.5, server.start).start()
    try:
        outcome = run_generate(
            _config(tmp_path, [server], 600, concurrency=4, max_attempts=1, model="fake-model")
        )
    finally:
        server.close()
    assert outcome.exit_code == 0, outcome.message  # max_attempts=1: any spent retry fails a row
    _check_exactly_once(tmp_path / "out", 600)


def test_rows_that_cannot_succeed_fail_at_once_and_stay_failed(tmp_path: Path) -> None:
    rows = prompt_rows(20)
    rows[3]["conversations"][0]["content"] = f"{FATAL_MARKER} please"
    server = StandIn().start()
    try:
        first = run_generate(_config(tmp_path, [server], 0, input_rows=rows))
        sent = server.counts.requests
        second = run_generate(_config(tmp_path, [server], 0, input_rows=rows))
        resent = server.counts.requests - sent
        third = run_generate(_config(tmp_path, [server], 0, input_rows=rows, retry_failed=True))
    finally:
        server.close()
    assert (first.exit_code, second.exit_code, third.exit_code) == (1, 1, 1)
    assert first.summary.failed == 1 and first.summary.retries == 0
    assert resent == 0  # a finished job re-run sends nothing
    errors = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [e["id"] for e in errors] == ["q3"]
    assert "HTTP 400" in errors[0]["error"] and "maximum context length" in errors[0]["error"]
    assert errors[0]["attempts"] == 2  # the third run tried it once more
    assert len(read_output(tmp_path / "out")) == 19


def test_no_thinking_and_limit(tmp_path: Path) -> None:
    server = StandIn().start()
    try:
        outcome = run_generate(_config(tmp_path, [server], 50, thinking=False, limit=10))
        rest = run_generate(_config(tmp_path, [server], 50, thinking=False))
    finally:
        server.close()
    assert outcome.exit_code == 0 and outcome.summary.done == 10
    assert outcome.summary.flags["missing_reasoning"] == 0
    assert rest.exit_code == 0
    _check_exactly_once(tmp_path / "out", 50, thinking=False)


def _cli() -> click.Group:
    return cli


def test_cli_generate_report_export(tmp_path: Path) -> None:
    import datasets  # type: ignore[import-untyped]

    server = StandIn().start()
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(30))
    out = tmp_path / "out"
    runner = CliRunner()
    try:
        result = runner.invoke(
            _cli(),
            [
                "generate",
                "--input",
                str(path),
                "--output",
                str(out),
                "--server",
                server.url,
                "--max-tokens",
                "64",
                "--rows-per-part",
                "12",
                "--json",
            ],
        )
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["done"] == 30 and summary["state"] == "finished"
    report = runner.invoke(_cli(), ["report", str(out), "--json"])
    assert report.exit_code == 0
    from_ledger = json.loads(report.stdout)
    for key in (
        "total",
        "done",
        "failed",
        "pending",
        "retries",
        "completion_tokens",
        "flags",
        "model",
        "thinking",
        "spec_accept_length",
        "state",
    ):
        assert from_ledger[key] == summary[key], key
    exported = runner.invoke(_cli(), ["export", str(out), "--format", "parquet", "--json"])
    assert exported.exit_code == 0, exported.output
    files = json.loads(exported.stdout)["files"]
    assert len(files) == 3  # 12 + 12 + 6 rows
    table = datasets.load_dataset("parquet", data_files=files, split="train")
    assert sorted(table["id"]) == sorted(f"q{i}" for i in range(30))
    row = table[0]
    assert row["conversations"][-1]["reasoning_content"].startswith("thinking about")
    assert row["meta"]["completion_tokens"] == 4 and row["meta"]["target_turns"] == [1]
    saved = runner.invoke(_cli(), ["export", str(out), "--format", "hf", "--json"])
    assert saved.exit_code == 0, saved.output
    loaded = datasets.load_from_disk(str(out / "hf"))
    assert sorted(loaded["id"]) == sorted(table["id"])
    assert (
        loaded[0]["conversations"] == table.filter(lambda r: r["id"] == loaded[0]["id"])[0]["conversations"]
    )


def test_cli_export_specforge_states_the_template_and_refuses_one_that_drops_reasoning(
    tmp_path: Path,
) -> None:
    server = StandIn().start()
    rows = [*prompt_rows(4), {"id": "cut", "prompt": f"{CUT_MARKER} long"}]
    try:
        assert (
            run_generate(_config(tmp_path, [server], 0, input_rows=rows, model="Qwen/Qwen3.6-27B")).exit_code
            == 0
        )
    finally:
        server.close()
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(
        _cli(), ["export", str(out), "--format", "specforge", "--max-length", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    told = json.loads(result.stdout)
    assert told["chat_template"] == "qwen3.5" and told["rows"] == 4 and told["over_max_length"] == 4
    exported = [json.loads(line) for line in (out / "specforge.jsonl").read_text().splitlines()]
    # one row per target turn, named by its index; the truncated row stays out
    assert {r["id"] for r in exported} == {"q0#1", "q1#1", "q2#1", "q3#1"}
    assert all(r["status"] == "success" and "meta" not in r for r in exported)
    with_flagged = runner.invoke(
        _cli(), ["export", str(out), "--format", "specforge", "--include-flagged", "--overwrite", "--json"]
    )
    assert json.loads(with_flagged.stdout)["rows"] == 5
    for template, reason in (("qwen", "drops every reasoning trace"), ("qwen3-thinking", "system prompt")):
        refused = runner.invoke(
            _cli(), ["export", str(out), "--format", "specforge", "--chat-template", template]
        )
        assert (
            refused.exit_code == 2
            and reason in refused.output
            and "--chat-template qwen3.5" in refused.output
        )
    report = runner.invoke(_cli(), ["report", str(out), "--max-length", "6", "--json"])
    lengths = json.loads(report.stdout)["lengths"]
    # the stand-in counts prompt words: "q N" is 2 tokens + 4 completion = 6 in all, within 6
    assert lengths["data"]["rows"] == 4 and lengths["data"]["over_max_length"] == 0
    assert lengths["data"]["percentiles"]["total"]["p100"] == 6
    assert lengths["flagged"]["rows"] == 1
    assert lengths["data"]["estimated_rows"] == 4  # the stand-in reports no reasoning_tokens
    shown = runner.invoke(_cli(), ["report", str(out), "--max-length", "6"])
    assert "rows over --max-length 6: 0" in shown.output


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "a"}\n{oops\n')
    result = CliRunner().invoke(
        _cli(),
        [
            "generate",
            "--input",
            str(path),
            "--output",
            str(tmp_path / "out"),
            "--server",
            "http://127.0.0.1:9",
            "--model",
            "m",
        ],
    )
    assert result.exit_code == 2
    assert f"{path}:2" in result.output


def test_job_stops_when_every_row_fails_from_the_start(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "prompt": f"{FATAL_MARKER} {i}"} for i in range(400)]
    server = StandIn().start()
    try:
        outcome = run_generate(_config(tmp_path, [server], 0, input_rows=rows, concurrency=4))
    finally:
        server.close()
    assert outcome.exit_code == 1
    assert "all failed" in outcome.message and "--retry-failed" in outcome.message
    assert outcome.summary.failed < 100 and outcome.summary.pending > 300


def test_run_name_gives_endpoint_and_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = StandIn().start()
    engine = subprocess.Popen(["sleep", "600"])  # the run's process, alive: its watcher finds nothing wrong
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "home"))
    (tmp_path / "engine.log").write_text("")
    write_state(
        ready_state(
            "qwen",
            endpoint=server.url,
            served_model_name="served-qwen",
            log_path=str(tmp_path / "engine.log"),
            exit_path=str(tmp_path / "exit"),
            pid=engine.pid,
            pgid=engine.pid,
            start_ticks=None,
            argv=("sleep", "600"),
            ready_log_bytes=0,
        )
    )
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(5))
    try:
        result = CliRunner().invoke(
            _cli(),
            ["generate", "--input", str(path), "--output", str(tmp_path / "out"), "--run", "qwen", "--json"],
        )
    finally:
        server.close()
        engine.kill()
        engine.wait()
    assert result.exit_code == 0, result.output
    assert {row["meta"]["model"] for row in read_output(tmp_path / "out")} == {"served-qwen"}


def _turn(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def test_every_turn_is_the_targets_and_each_prompt_is_its_own_conversation(tmp_path: Path) -> None:
    given = [
        _turn("system", "be brief"),
        _turn("user", "u1"),
        _turn("assistant", "NOT THE TARGET"),
        _turn("user", "u2"),
        _turn("assistant", "NOT THE TARGET EITHER"),
    ]
    server = StandIn().start()
    try:
        outcome = run_generate(
            _config(tmp_path, [server], 0, input_rows=[{"id": "m", "conversations": given}])
        )
    finally:
        server.close()
    assert outcome.exit_code == 0
    (row,) = read_output(tmp_path / "out")
    first = {"role": "assistant", "content": answer_for("u1")[0], "reasoning_content": answer_for("u1")[1]}
    second = {"role": "assistant", "content": answer_for("u2")[0], "reasoning_content": answer_for("u2")[1]}
    assert row["conversations"] == [given[0], given[1], first, given[3], second]
    assert row["meta"]["target_turns"] == [2, 4] and row["status"] == "success"
    assert [t["index"] for t in row["meta"]["turns"]] == [2, 4]
    # turn 2 was asked with the target's own first answer (its reasoning left out, as
    # SpecForge's and speculators' regeneration send history)
    history = {"role": "assistant", "content": first["content"]}
    assert [b["messages"] for b in server.counts.bodies] == [given[:2], [*given[:2], history, given[3]]]


def test_flagged_rows_go_to_their_own_split_and_a_cut_turn_ends_the_row(tmp_path: Path) -> None:
    rows = [
        *prompt_rows(3),
        {
            "id": "cut",
            "conversations": [
                _turn("user", f"{CUT_MARKER} u1"),
                _turn("assistant", "x"),
                _turn("user", "never asked"),
            ],
        },
    ]
    server = StandIn().start()
    try:
        outcome = run_generate(_config(tmp_path, [server], 0, input_rows=rows))
    finally:
        server.close()
    out = tmp_path / "out"
    assert outcome.exit_code == 0
    assert outcome.summary.clean == 3 and outcome.summary.flagged == 1
    assert {r["id"] for r in read_output(out)} == {"q0", "q1", "q2"}
    (flagged,) = [
        json.loads(line) for line in (out / "flagged" / "part-00000.jsonl").read_text().splitlines()
    ]
    assert flagged["meta"]["flags"] == ["truncated"] and flagged["meta"]["target_turns"] == [1]
    assert len(flagged["conversations"]) == 2  # the turn after the cut one was not generated
    assert "never asked" not in server.counts.per_prompt
    manifest = json.loads((out / "manifest.json").read_text())
    assert {p["file"] for p in manifest["parts"]} == {"data/part-00000.jsonl", "flagged/part-00000.jsonl"}
    assert manifest["counts"]["flagged"] == 1


def test_keep_given_turns_sends_the_given_conversation_and_tools_and_writes_only_the_last_turn(
    tmp_path: Path,
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    given = [
        _turn("user", "add 2 and 3"),
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "5", "tool_call_id": "c1"},
    ]
    server = StandIn().start()
    try:
        config = _config(
            tmp_path,
            [server],
            0,
            input_rows=[{"id": "t", "tools": tools, "conversations": given}],
            keep_given_turns=True,
        )
        assert run_generate(config).exit_code == 0
    finally:
        server.close()
    ((body,), (row,)) = server.counts.bodies, read_output(tmp_path / "out")
    assert body["messages"] == given and body["tools"] == tools
    assert row["conversations"][:3] == given and row["tools"] == tools
    assert row["meta"]["keep_given_turns"] is True and row["meta"]["target_turns"] == [3]
    assert row["conversations"][3]["content"] == answer_for("5")[0]
