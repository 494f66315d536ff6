"""specpilot's export read by the real trainers: SpecForge and speculators from PyPI.

A job runs against the fake server (single- and multi-turn rows, one truncated row),
is exported with `specpilot export --format specforge|speculators`, and the trainers'
own data code builds training samples from it (tests/conformance/trainers_harness.py,
run in the cached `trainers` venv, CPU only). Asserted on specpilot's own output:

* SpecForge's validation script (vendored: the wheel does not ship scripts/) passes;
* one SpecForge sample per exported row, one speculators sample per target turn;
* each sample's text is exactly what the server was sent for the row's last turn,
  rendered with the Qwen3.5-style template, plus that turn's reasoning and answer;
* the loss mask covers exactly the target's turns: reasoning, `</think>`, answer and
  the end-of-turn token of every target turn, nothing of the user's or system's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.demo.enginevenv import ensure_engine_venv
from specpilot.generate.endpoints import Endpoint
from specpilot.generate.job import JobConfig, run_generate
from tests.generate.conftest import read_output, write_jsonl
from tests.generate.fake_server import CUT_MARKER, FakeServer

pytestmark = pytest.mark.conformance

HERE = Path(__file__).parent
VALIDATOR = HERE / "vendor" / "specforge_scripts" / "validate_regenerated_data.py"
MAX_LENGTH_TOKENS = 4096


def _turn(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


ROWS: list[dict[str, Any]] = [
    {"id": "single-0", "prompt": "What is the capital of France?"},
    {"id": "single-1", "conversations": [_turn("system", "Be brief."), _turn("user", "Sort a list.")]},
    {
        "id": "multi-0",
        "conversations": [
            _turn("user", "Explain recursion."),
            _turn("assistant", "an answer the target did not write"),
            _turn("user", "Now in one sentence."),
            _turn("assistant", "another"),
            _turn("user", "And an example?"),
        ],
    },
    {
        "id": "multi-1",
        "conversations": [
            _turn("system", "You answer in French."),
            _turn("user", "good morning"),
            _turn("assistant", "x"),
            _turn("user", "thank you"),
            _turn("assistant", "y"),
        ],
    },
    {"id": "cut", "prompt": f"{CUT_MARKER} a very long question"},
]


def render_prompt(messages: list[dict[str, Any]]) -> str:
    """A request as the Qwen3.5-style template renders it (trainers_harness.QWEN35_STYLE_TEMPLATE).

    Every assistant turn of a request is history: an empty think block, then the answer.
    """
    text = ""
    for m in messages:
        if m["role"] == "assistant":
            text += f"<|im_start|>assistant\n<think>\n\n</think>\n\n{m['content']}<|im_end|>\n"
        else:
            text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return text + "<|im_start|>assistant\n<think>\n"


def supervised(turn: dict[str, Any], *, last: bool) -> str:
    """What a trainer must supervise of a target turn: all of it after `<think>\\n`."""
    reasoning = turn["reasoning_content"] if last else ""
    return f"{reasoning}\n</think>\n\n{turn['content']}<|im_end|>\n"


def as_sent(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turns as a request carries them: earlier target turns without their reasoning."""
    return [
        {k: v for k, v in t.items() if k != "reasoning_content"} if t["role"] == "assistant" else t
        for t in turns
    ]


@pytest.fixture(scope="module")
def trainers_python() -> Path:
    return ensure_engine_venv("trainers")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[dict[str, Any]]]]:
    """The job's directory and, per request, the messages the server was sent."""
    tmp = tmp_path_factory.mktemp("trainers")
    server = FakeServer().start()
    try:
        outcome = run_generate(
            JobConfig(
                write_jsonl(tmp / "in.jsonl", ROWS),
                tmp / "out",
                [Endpoint(server.url)],
                "Qwen/Qwen3.6-27B",
                True,
                show_progress=False,
                flush_interval_s=0.05,
            )
        )
    finally:
        server.close()
    assert outcome.exit_code == 0 and outcome.summary.clean == 4 and outcome.summary.flagged == 1
    for fmt in ("specforge", "speculators"):
        result = CliRunner().invoke(cli, ["export", str(tmp / "out"), "--format", fmt, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["chat_template"] == "qwen3.5"
    return tmp / "out", [body["messages"] for body in server.counts.bodies]


def test_specforge_validation_script_passes(trainers_python: Path, exported: tuple[Path, Any]) -> None:
    out, _ = exported
    data = str(out / "specforge.jsonl")
    argv = [
        str(trainers_python),
        str(VALIDATOR),
        "--data-path",
        data,
        "--expect-reasoning",
        "--strict-think-markers",
    ]
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rows: 4" in result.stdout and "assistant messages: 7" in result.stdout
    assert "validation passed" in result.stdout


def test_trainers_train_exactly_on_the_targets_turns(
    trainers_python: Path, exported: tuple[Path, list[list[dict[str, Any]]]], tmp_path: Path
) -> None:
    out, sent = exported
    argv = [
        str(trainers_python),
        str(HERE / "trainers_harness.py"),
        *("--specforge", str(out / "specforge.jsonl"), "--speculators", str(out / "speculators.jsonl")),
        *("--work", str(tmp_path), "--max-length", str(MAX_LENGTH_TOKENS)),
    ]
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    samples = json.loads((tmp_path / "samples.json").read_text())
    rows = read_output(out)
    assert len(rows) == 4 and sum(len(r["meta"]["target_turns"]) for r in rows) == 7

    # SpecForge: one sample per row. Its text is what the server was sent for the row's
    # last turn plus that turn's reasoning and answer; its mask is on every target turn.
    expected = []
    for row in rows:
        turns, targets = row["conversations"], row["meta"]["target_turns"]
        request = as_sent(turns[: targets[-1]])
        assert request in sent  # exactly what the server was asked
        spans = [supervised(turns[i], last=i == targets[-1]) for i in targets]
        expected.append((render_prompt(request) + spans[-1], spans))
    got = sorted((s["text"], s["supervised"]) for s in samples["specforge"])
    assert got == sorted(expected)

    # speculators: one sample per target turn, supervising that turn only
    expected_turns = []
    for row in rows:
        turns = row["conversations"]
        for i in row["meta"]["target_turns"]:
            assert as_sent(turns[:i]) in sent
            expected_turns.append(
                (
                    render_prompt(as_sent(turns[:i])) + supervised(turns[i], last=True),
                    [supervised(turns[i], last=True)],
                )
            )
    got_turns = sorted((s["text"], s["supervised"]) for s in samples["speculators"])
    assert got_turns == sorted(expected_turns)
