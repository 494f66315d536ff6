"""specpilot's export read by the real trainers: SpecForge and speculators from PyPI.

Jobs run against the stand-in (single- and multi-turn rows, one truncated row), one
where the target writes every assistant turn and one with `--keep-given-turns`; each is
exported with `specpilot export --format specforge` (one row per target turn, the
default), `--whole-conversations` and `--format speculators`, and the trainers' own data
code builds training samples from them (tests/conformance/trainers_harness.py, run in the
cached `trainers` venv, CPU only). Asserted on specpilot's own output:

* SpecForge's validation script (vendored: the wheel does not ship scripts/) passes;
* the set of target turns in the trainers' loss is exactly the set the target wrote, in
  every mode: each sample's text is what the server was sent for one target turn,
  rendered with the Qwen3.5-style template, plus that turn's reasoning and answer, and its
  loss mask covers that turn only (`</think>`, answer and end-of-turn token included);
  no given assistant turn, user or system text is ever supervised;
* with whole conversations, SpecForge's loss covers only each row's last target turn (the
  reason the per-turn rows are the default);
* speculators trains every assistant turn of a row, so a `--keep-given-turns` row with
  given assistant turns is left out of its export, with a warning.
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
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import CUT_MARKER, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import read_output, write_jsonl

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


GIVEN = "an answer the target did not write"


def render_prompt(messages: list[dict[str, Any]]) -> str:
    """A request as the Qwen3.5-style template renders it (trainers_harness.QWEN35_STYLE_TEMPLATE).

    Every assistant turn of a request comes before its last user turn: its answer alone.
    """
    text = ""
    for m in messages:
        text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return text + "<|im_start|>assistant\n<think>\n"


def supervised(turn: dict[str, Any]) -> str:
    """What a trainer must supervise of a target turn: all of it after `<think>\\n`."""
    return f"{turn['reasoning_content']}\n</think>\n\n{turn['content']}<|im_end|>\n"


def as_sent(turns: list[dict[str, Any]], targets: list[int]) -> list[dict[str, Any]]:
    """Turns as a request carries them: earlier target turns without their reasoning."""
    return [
        {k: v for k, v in t.items() if k != "reasoning_content"} if i in targets else t
        for i, t in enumerate(turns)
    ]


Sample = tuple[str, list[str]]


def target_samples(rows: list[dict[str, Any]], sent: list[list[dict[str, Any]]]) -> list[Sample]:
    """One sample per target turn: what the server was sent for it, then the turn, supervised alone."""
    samples = []
    for row in rows:
        turns, targets = row["conversations"], row["meta"]["target_turns"]
        for i in targets:
            request = as_sent(turns[:i], targets)
            assert request in sent  # exactly what the server was asked
            samples.append((render_prompt(request) + supervised(turns[i]), [supervised(turns[i])]))
    return sorted(samples)


def got(samples: list[dict[str, Any]]) -> list[Sample]:
    return sorted((s["text"], s["supervised"]) for s in samples)


MODES = {"targets-write-all": False, "keep-given-turns": True}


@pytest.fixture(scope="module")
def trainers_python() -> Path:
    return ensure_engine_venv("trainers")


def _export(out: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["export", str(out), *args, "--json"])
    assert result.exit_code == 0, result.output
    told: dict[str, Any] = json.loads(result.stdout)
    # the template is SpecForge's to train with; speculators renders with the model's own
    assert told["chat_template"] == ("qwen3.5" if "specforge" in args else None)
    return told


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[list[dict[str, Any]]]]]:
    """Per mode: the job's directory and, per request, the messages the server was sent."""
    done = {}
    for mode, keep in MODES.items():
        tmp = tmp_path_factory.mktemp(mode)
        server = StandIn().start()
        try:
            outcome = run_generate(
                JobConfig(
                    write_jsonl(tmp / "in.jsonl", ROWS),
                    tmp / "out",
                    [Endpoint(server.url)],
                    "Qwen/Qwen3.6-27B",
                    Sampling(True),
                    keep_given_turns=keep,
                    show_progress=False,
                    flush_interval_s=0.05,
                )
            )
        finally:
            server.close()
        out = tmp / "out"
        # with --keep-given-turns multi-1 (ending with an assistant turn) is rejected
        assert outcome.exit_code == 0 and outcome.summary.clean == (3 if keep else 4)
        assert outcome.summary.flagged == 1
        assert _export(out, "--format", "specforge")["per_turn"] is True
        _export(out, "--format", "specforge", "--whole-conversations", "--to", str(out / "whole.jsonl"))
        told = _export(out, "--format", "speculators")
        assert bool(told["warnings"]) is keep  # keep: multi-0's given turns keep it out
        done[mode] = (out, [body["messages"] for body in server.counts.bodies])
    return done


@pytest.fixture(scope="module")
def samples(
    trainers_python: Path,
    jobs: dict[str, tuple[Path, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, list[dict[str, Any]]]:
    """Every export's training samples as the trainers' own code built them, by file."""
    work = tmp_path_factory.mktemp("harness")
    argv = [str(trainers_python), str(HERE / "trainers_harness.py")]
    for out, _ in jobs.values():
        argv += ["--specforge", str(out / "specforge.jsonl"), "--specforge", str(out / "whole.jsonl")]
        argv += ["--speculators", str(out / "speculators.jsonl")]
    argv += ["--work", str(work), "--max-length", str(MAX_LENGTH_TOKENS)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded: dict[str, list[dict[str, Any]]] = json.loads((work / "samples.json").read_text())
    return loaded


def test_specforge_validation_script_passes(trainers_python: Path, jobs: dict[str, tuple[Path, Any]]) -> None:
    out, _ = jobs["targets-write-all"]
    for data, rows in ((out / "specforge.jsonl", 7), (out / "whole.jsonl", 4)):
        argv = [str(trainers_python), str(VALIDATOR), "--data-path", str(data)]
        argv += ["--expect-reasoning", "--strict-think-markers"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"rows: {rows}" in result.stdout and "validation passed" in result.stdout


@pytest.mark.parametrize("mode", MODES)
def test_specforge_trains_exactly_the_targets_turns(
    mode: str, jobs: dict[str, tuple[Path, list[list[dict[str, Any]]]]], samples: dict[str, Any]
) -> None:
    out, sent = jobs[mode]
    rows = read_output(out)
    assert sum(len(r["meta"]["target_turns"]) for r in rows) == (3 if MODES[mode] else 7)
    assert got(samples[str(out / "specforge.jsonl")]) == target_samples(rows, sent)


@pytest.mark.parametrize("mode", MODES)
def test_speculators_trains_exactly_the_targets_turns_of_what_it_is_given(
    mode: str, jobs: dict[str, tuple[Path, list[list[dict[str, Any]]]]], samples: dict[str, Any]
) -> None:
    out, sent = jobs[mode]
    rows = read_output(out)
    exported = [json.loads(line) for line in (out / "speculators.jsonl").read_text().splitlines()]
    kept = [r for r in rows if r["id"] in {e["id"] for e in exported}]
    assert all(e["target_turns"] == r["meta"]["target_turns"] for e, r in zip(exported, kept, strict=True))
    if MODES[mode]:  # multi-0 holds given assistant turns: left out, not trained as the target's
        assert {r["id"] for r in rows} - {r["id"] for r in kept} == {"multi-0"}
    else:
        assert kept == rows
    assert got(samples[str(out / "speculators.jsonl")]) == target_samples(kept, sent)


@pytest.mark.parametrize("mode", MODES)
def test_no_given_turn_is_in_any_loss(
    mode: str, jobs: dict[str, tuple[Path, Any]], samples: dict[str, Any]
) -> None:
    out, _ = jobs[mode]
    for name in ("specforge.jsonl", "whole.jsonl", "speculators.jsonl"):
        spans = [span for sample in samples[str(out / name)] for span in sample["supervised"]]
        assert spans and not any(GIVEN in span or "another" in span for span in spans)
        # each one a target turn: its reasoning (the stand-in's), </think>, answer, end of turn
        assert all(span.startswith("thinking about ") and span.endswith("<|im_end|>\n") for span in spans)


def test_whole_conversations_train_only_each_rows_last_turn(
    jobs: dict[str, tuple[Path, Any]], samples: dict[str, Any]
) -> None:
    """Why per-turn rows are SpecForge's default: with Qwen3.x templates earlier target turns
    render without `<think>`, so SpecForge's assistant header matches the last turn only."""
    out, _ = jobs["targets-write-all"]
    rows = read_output(out)
    expected = []
    for row in rows:
        turns, last = row["conversations"], row["meta"]["target_turns"][-1]
        expected.append((render_prompt(turns[:last]) + supervised(turns[last]), [supervised(turns[last])]))
    assert got(samples[str(out / "whole.jsonl")]) == sorted(expected)
    assert len(expected) < sum(len(r["meta"]["target_turns"]) for r in rows)  # turns left untrained
