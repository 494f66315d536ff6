"""The yield guard: a job whose rows cannot make a dataset stops early with the cause, the
numbers and the fix; a job with a few bad rows runs to its end; no row is lost or doubled."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.generate.rows.repetition import repeated_ngram_share
from specpilot.generate.rows.types import Answer
from specpilot.generate.rows.validate import answer_flags
from specpilot.generate.yields import CAUSE_NAMES, YieldFloor, YieldGuard, propose_budget
from tests.fakeengines.standin import Config, Faults, StandIn, is_cut_share
from tests.fixtures.jobs import run_generate
from tests.generate.test_job import _config

ROWS = 2000
CUT_AT = 64
FULL_BUDGET = 400  # the stand-in answers every prompt in full from this max_tokens on
CONTEXT = 4096


def _written_ids(out: Path) -> list[str]:
    """Every row id in the job's parts, clean and flagged, repeats included."""
    ids = []
    for part in sorted(out.glob("*/part-*.jsonl")):
        ids += [json.loads(line)["id"] for line in part.read_text().splitlines()]
    return ids


def _server(cut_share: float) -> StandIn:
    config = Config(answers="echo", metrics="vllm", served_name="fake-model", max_model_len=CONTEXT)
    return StandIn(Faults(cut_share=cut_share, cut_unless_max_tokens=FULL_BUDGET), config=config).start()


@pytest.fixture
def mostly_cut() -> Any:
    server = _server(0.97)
    yield server
    server.close()


def test_a_job_whose_answers_are_cut_stops_early_with_the_lengths_and_the_fix(
    tmp_path: Path, mostly_cut: StandIn
) -> None:
    stopped = run_generate(_config(tmp_path, [mostly_cut], ROWS, max_tokens=CUT_AT, concurrency=64))
    assert stopped.exit_code == 1
    sent = mostly_cut.counts.answered
    assert 200 <= sent < 0.4 * ROWS  # judged on its first 200 rows, the rest never sent
    message = stopped.message
    assert message.startswith("yield guard:") and "under the floor of 80%" in message
    assert f"cut at max_tokens {CUT_AT}" in message and f"p99 {CUT_AT}" in message
    assert f"the true p99 is at least {CUT_AT}" in message
    # the fix: the room the context leaves after the longest prompt (2 words + the template's 64)
    assert f"--max-tokens {CONTEXT - 66} --retry-truncated" in message
    assert stopped.yield_stop is not None and stopped.yield_stop["by_cause"]["truncated"] > 150
    # every row answered was committed, once: the rows in flight finished
    ids = _written_ids(tmp_path / "out")
    assert len(ids) == len(set(ids)) == sent == stopped.summary.done

    again = run_generate(
        _config(tmp_path, [mostly_cut], ROWS, max_tokens=FULL_BUDGET, retry_truncated=True, concurrency=64)
    )
    assert again.exit_code == 0, again.message
    assert again.summary.done == ROWS and again.summary.clean == ROWS
    ids = _written_ids(tmp_path / "out")
    assert sorted(ids) == sorted(f"q{i}" for i in range(ROWS))  # each row exactly once
    # only the rows cut the first time were sent twice
    twice = {prompt for prompt, n in mostly_cut.counts.per_prompt.items() if n == 2}
    assert twice and all(is_cut_share(prompt, 0.97) for prompt in twice)
    assert max(mostly_cut.counts.per_prompt.values()) == 2


def test_a_few_cut_rows_do_not_stop_the_job(tmp_path: Path) -> None:
    server = _server(0.02)
    try:
        done = run_generate(_config(tmp_path, [server], ROWS, max_tokens=CUT_AT, concurrency=64))
    finally:
        server.close()
    assert done.exit_code == 0, done.message
    assert sorted(_written_ids(tmp_path / "out")) == sorted(f"q{i}" for i in range(ROWS))
    cut = done.summary.flagged
    assert 0 < cut < 0.05 * ROWS
    assert done.summary.by_cause == {**dict.fromkeys(CAUSE_NAMES, 0), "truncated": cut}


def test_a_finished_job_under_its_floor_is_not_done(tmp_path: Path) -> None:
    """76% clean over 300 rows: within doubt of the floor while the guard judges (the bound is
    above 80%), but every row is measured at the end: exit 1 with the counts and the fix."""
    server = _server(0.25)
    try:
        floor = YieldFloor(80, 300)
        ended = run_generate(_config(tmp_path, [server], 300, max_tokens=CUT_AT, yield_floor=floor))
    finally:
        server.close()
    assert ended.exit_code == 1 and ended.summary.done == 300 and ended.summary.flagged == 72
    assert ended.message.startswith("every row was processed, but only 228 of 300 are clean (76.0%)")
    assert "72 truncated" in ended.message and "--retry-truncated" in ended.message
    assert ended.yield_stop is not None and ended.yield_stop["stopped_early"] is False


def _meta(flags: list[str], completion: int = 10) -> dict[str, Any]:
    return {"flags": flags, "turns": [{"completion_tokens": completion, "prompt_tokens": 5}]}


def test_the_guard_waits_for_its_rows_and_does_not_fire_on_noise() -> None:
    # 75% clean over 200-250 rows is under 80%, but not beyond doubt: the job goes on
    guard = YieldGuard(YieldFloor(80, 200), 1000, 64)
    fired = [guard.observe(_meta([] if i % 4 else ["truncated"])) for i in range(250)]
    assert not any(fired)
    # half clean is: it fires once, at the 200th row, not before
    guard = YieldGuard(YieldFloor(80, 200), 1000, 64)
    fired = [guard.observe(_meta([] if i % 2 else ["truncated"])) for i in range(400)]
    assert fired.index(True) == 199 and sum(fired) == 1
    # 2% of a 20,000-row input is 400: it waits for them
    guard = YieldGuard(YieldFloor(80, 200), 20_000, 64)
    fired = [guard.observe(_meta(["truncated"])) for _ in range(400)]
    assert fired.index(True) == 399
    assert not YieldGuard(YieldFloor(0, 200), 1000, 64).observe(_meta(["truncated"]))  # off


def test_each_cause_names_its_fix() -> None:
    for flags, said in (
        (["missing_reasoning"], "--reasoning-parser"),
        (["repetitive"], "presence"),
        (["empty_content"], "chat template"),
        # cut while thinking: empty and without reasoning too, but it was cut
        (["empty_content", "missing_reasoning", "truncated"], "--retry-truncated"),
    ):
        guard = YieldGuard(YieldFloor(80, 50), 100, 64)
        assert any([guard.observe(_meta(flags, completion=64)) for _ in range(60)])
        assert said in guard.stop_message(1000, job=False), flags
    job_fix = YieldGuard(YieldFloor(80, 50), 100, 64)
    for _ in range(50):
        job_fix.observe(_meta(["truncated"], completion=64))
    assert "[job] min_clean_yield" in job_fix.stop_message(1000, job=True)


def test_a_budget_covers_p99_within_the_context() -> None:
    lengths = list(range(1, 1001))  # p99 = 990, none cut at 2048
    budget = propose_budget(lengths, 2048, 32768, 500)
    assert (budget.p50, budget.p99, budget.cut, budget.censored, budget.proposed) == (
        500,
        990,
        0,
        False,
        1024,
    )
    assert propose_budget(lengths, 2048, 1200, 500).proposed == 700  # the context bounds it
    cut = propose_budget([64] * 90 + [10] * 10, 64, 8192, 100)  # censored: p99 is beyond 64
    assert cut.censored and cut.proposed == 8092 and "at least 64" in cut.lengths_text()
    assert propose_budget([64] * 100, 64, None, 100).proposed == 128  # no context known: a step
    assert propose_budget([64] * 100, 64, 150, 100).proposed is None  # no larger one fits


def test_a_looping_answer_is_flagged_repetitive() -> None:
    loop = "Wait, let me check the sum again. " * 60
    assert repeated_ngram_share(loop) > 0.9
    prose = " ".join(
        f"Step {i}: the {i}th term squared is {i * i}, so we add it to the total." for i in range(40)
    )
    assert repeated_ngram_share(prose) < 0.5
    assert repeated_ngram_share("short answer") == 0.0
    looping = Answer(content="42", reasoning=loop, finish_reason="stop", prompt_tokens=5, completion_tokens=400,
                     spec_accept_length=None)  # fmt: skip
    assert answer_flags(looping, thinking=True) == ["repetitive"]
    fine = Answer(content="42", reasoning=prose, finish_reason="stop", prompt_tokens=5, completion_tokens=400,
                  spec_accept_length=None)  # fmt: skip
    assert answer_flags(fine, thinking=True) == []


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--min-clean-yield", "120"], "--min-clean-yield: must be a percent from 0 to 100"),
        (["--min-clean-yield", "0.8"], "--min-clean-yield: 0.8 reads as a fraction"),
        (["--guard-min-rows", "10"], "--guard-min-rows: 10 rows are too few"),
    ],
)
def test_a_bad_floor_or_minimum_is_refused_before_any_request(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    server = _server(0.0)
    try:
        (tmp_path / "in.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
        base = ["generate", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out")]
        result = CliRunner().invoke(cli, [*base, "--server", server.url, *flags])
        assert result.exit_code == 2 and said in result.output, result.output
        assert server.counts.requests == 0 and not (tmp_path / "out").exists()
    finally:
        server.close()


def test_the_cut_share_of_the_stand_in_is_a_share() -> None:
    cut = Counter(is_cut_share(f"q {i}", 0.97) for i in range(ROWS))
    assert 0.95 * ROWS < cut[True] < 0.99 * ROWS
