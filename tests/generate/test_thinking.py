"""Inline thinking split by specpilot: the same rows whatever the server's reasoning parser does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.generate.dispatch.servers import ServerPool
from specpilot.generate.dispatch.stats import progress_numbers
from specpilot.generate.ledger.report import summarize
from specpilot.generate.ledger.store import Ledger
from specpilot.generate.rows.thinking import NO_REASONING_LIMIT, markers_for, split_inline
from tests.fakeengines.standin import CUT_MARKER, Faults, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import read_output
from tests.generate.test_job import _config

QWEN = "Qwen/Qwen3.6-27B"
MARKERS = markers_for(QWEN)


def test_both_inline_shapes_split_as_the_servers_parser_would() -> None:
    assert MARKERS is not None
    for content in ("<think>\nR1\nR2\n</think>\n\nA", "R1\nR2\n</think>\n\nA", "\n<think>R1\nR2</think>A"):
        assert split_inline(content, "stop", MARKERS, thinking=True) == ("R1\nR2", "A")


def test_an_answer_cut_off_while_thinking_is_all_reasoning() -> None:
    assert MARKERS is not None
    assert split_inline("<think>\nhalf a tho", "length", MARKERS, thinking=True) == ("half a tho", "")


def test_a_cut_off_answer_without_markers_never_becomes_reasoning() -> None:
    # once, a truncated answer's text went into reasoning_content and switched the no-reasoning stop off
    assert MARKERS is not None
    assert split_inline("half an answer", "length", MARKERS, thinking=True) is None


def test_content_without_markers_is_left_alone() -> None:
    assert MARKERS is not None
    assert split_inline("just an answer", "stop", MARKERS, thinking=True) is None
    assert split_inline("cut answer", "length", MARKERS, thinking=False) is None
    assert markers_for("meta-llama/Llama-3.1-8B") is None


MULTI = [
    {"id": "one", "prompt": "What is 2 + 2?"},
    {
        "id": "multi",
        "conversations": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Explain recursion."},
            {"role": "assistant", "content": "given"},
            {"role": "user", "content": "Now an example?"},
        ],
    },
]


def _job(
    tmp_path: Path, faults: Faults, rows: int = 40, **extra: Any
) -> tuple[Any, list[dict[str, Any]], StandIn]:
    tmp_path.mkdir(exist_ok=True)
    server = StandIn(faults).start()
    try:
        outcome = run_generate(_config(tmp_path, [server], rows, model=QWEN, **extra))
    finally:
        server.close()
    return outcome, read_output(tmp_path / "out"), server


#: what differs between the two jobs by design: which server, and whether specpilot split
SPLIT_OR_SERVER = ("reasoning_split", "server", "turns")


def _without_split(row: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in row["meta"].items() if k not in SPLIT_OR_SERVER}
    turns = [{k: v for k, v in t.items() if k not in SPLIT_OR_SERVER} for t in row["meta"]["turns"]]
    return {**row, "meta": {**meta, "turns": turns}}


@pytest.mark.parametrize("inline", ["think", "closing"])
def test_a_server_without_a_parser_gives_the_same_rows(tmp_path: Path, inline: str) -> None:
    parsed, want, _ = _job(tmp_path / "parser", Faults(), input_rows=MULTI)
    outcome, got, server = _job(tmp_path / "inline", Faults(inline_thinking=inline), input_rows=MULTI)
    assert parsed.exit_code == outcome.exit_code == 0 and outcome.summary.flagged == 0
    assert sorted(map(_without_split, got), key=lambda r: r["id"]) == sorted(
        map(_without_split, want), key=lambda r: r["id"]
    )
    assert all(row["meta"]["reasoning_split"] for row in got)
    assert all(turn["reasoning_split"] for row in got for turn in row["meta"]["turns"])
    assert not any(row["meta"]["reasoning_split"] for row in want)
    # the second turn's history is the target's answer alone, no think block
    for body in server.counts.bodies:
        for message in body["messages"]:
            assert "think>" not in message["content"] and "reasoning_content" not in message


def test_no_reasoning_at_all_stops_the_job_with_the_cause(tmp_path: Path) -> None:
    outcome, _, server = _job(tmp_path, Faults(inline_thinking="none"), concurrency=2)
    assert outcome.exit_code == 1
    assert f"first {NO_REASONING_LIMIT} finished answers all came back without reasoning" in outcome.message
    assert "--reasoning-parser qwen3" in outcome.message and "--no-thinking" in outcome.message
    assert server.counts.answered < NO_REASONING_LIMIT + 4  # not the whole job
    assert outcome.summary.flags["missing_reasoning"] == outcome.summary.done

    # export of such a job names the flags and --include-flagged, exit 2, nothing written
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "out"), "--format", "specforge"])
    assert result.exit_code == 2
    assert "no clean rows" in result.output and "missing_reasoning" in result.output
    assert "--include-flagged" in result.output
    assert not (tmp_path / "out" / "specforge.jsonl").exists()


def test_the_guards_advice_no_thinking_resumes_the_same_job(tmp_path: Path) -> None:
    """The guard says "pass --no-thinking ... then run the same command again": that command is
    accepted, and the rows that came back without reasoning are generated again."""
    server = StandIn(Faults(inline_thinking="none")).start()
    said: list[str] = []
    try:
        stopped = run_generate(_config(tmp_path, [server], 40, model=QWEN, concurrency=2))
        assert stopped.exit_code == 1 and stopped.summary.done > 0
        again = run_generate(_config(tmp_path, [server], 40, model=QWEN, thinking=False, notify=said.append))
        # only that switch, only then: turning it back on is another job's parameters
        with pytest.raises(UserError, match="other parameters: thinking=false"):
            run_generate(_config(tmp_path, [server], 40, model=QWEN))
    finally:
        server.close()
    assert again.exit_code == 0, again.message
    assert again.summary.done == again.summary.clean == 40 and again.summary.flagged == 0
    assert f"the {stopped.summary.done} rows that came back without reasoning are queued" in " ".join(said)
    rows = read_output(tmp_path / "out")
    assert sorted(r["id"] for r in rows) == sorted(f"q{i}" for i in range(40))
    assert not any(r["meta"]["thinking"] for r in rows)


def test_no_reasoning_does_not_stop_a_job_without_thinking(tmp_path: Path) -> None:
    outcome, rows, _ = _job(tmp_path, Faults(inline_thinking="none"), thinking=False)
    assert outcome.exit_code == 0 and len(rows) == 40


def test_the_progress_line_counts_flags(tmp_path: Path) -> None:
    """The progress line reads the ledger's summary (one set of counters): its flag counts too."""
    out = tmp_path / "out"
    server = StandIn(Faults(inline_thinking="none")).start()
    try:
        prompts = tmp_path / "p.jsonl"
        prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(3)))
        CliRunner().invoke(
            cli, ["generate", "--input", str(prompts), "--output", str(out), "--server", server.url]
        )
    finally:
        server.close()
    pool = ServerPool(["http://a"], 1)
    numbers = progress_numbers(summarize(Ledger.in_dir(out, readonly=True)), None, pool)
    assert numbers["flagged"] == "missing_reasoning 3"


def test_a_cut_off_answer_does_not_switch_the_no_reasoning_stop_off(tmp_path: Path) -> None:
    # once, one truncated row among answers without reasoning ran the job to its end with 0 clean rows
    rows = [
        {"id": "cut", "prompt": f"{CUT_MARKER} first"},
        *({"id": f"q{i}", "prompt": f"q {i}"} for i in range(40)),
    ]
    outcome, _, _ = _job(tmp_path, Faults(inline_thinking="none"), concurrency=1, input_rows=rows)
    assert outcome.exit_code == 1
    assert f"first {NO_REASONING_LIMIT} finished answers all came back without reasoning" in outcome.message
    flagged = [json.loads(line) for line in (tmp_path / "out" / "flagged" / "part-00000.jsonl").open()]
    (cut,) = [row for row in flagged if row["id"] == "cut"]
    assert cut["conversations"][-1]["reasoning_content"] == ""
