"""Row construction and the length report: token splits, histogram, rows over --max-length."""

from __future__ import annotations

from specpilot.export.lengths import length_report
from specpilot.generate.dispatch.client import parse_answer
from specpilot.generate.rows.output import TurnResult, build_row, split_tokens
from specpilot.generate.rows.types import Answer, PromptRow


def _answer(
    reasoning: str, content: str, completion_tokens: int, reasoning_tokens: int | None = None
) -> Answer:
    return Answer(content, reasoning, "stop", 10, completion_tokens, None, reasoning_tokens)


def test_reasoning_tokens_from_usage_when_reported_else_estimated() -> None:
    raw = (
        b'{"choices":[{"message":{"content":"a","reasoning_content":"r"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":3,"completion_tokens":10,"completion_tokens_details":{"reasoning_tokens":7}}}'
    )
    assert split_tokens(parse_answer(raw)) == (7, 3, False)
    assert split_tokens(_answer("x" * 30, "y" * 10, 8)) == (6, 2, True)
    assert split_tokens(_answer("", "y" * 10, 8)) == (0, 8, False)


def test_row_meta_sums_turns_and_lengths_count_rows_over_max_length() -> None:
    row = PromptRow(0, "r", [[{"role": "user", "content": "u1"}], [{"role": "user", "content": "u2"}]])
    first = Answer("a1", "t1", "stop", 100, 50, 3.0, 40)
    second = Answer("a2", "t2", "stop", 200, 3000, None, 2900)
    built = build_row(
        row,
        [TurnResult(first, "s1"), TurnResult(second, "s2")],
        model="m",
        thinking=True,
        keep_given_turns=False,
    )
    meta = built["meta"]
    assert meta["target_turns"] == [1, 3] and meta["server"] == "s2" and meta["spec_accept_length"] == 3.0
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["reasoning_tokens"]) == (300, 3050, 2940)
    report = length_report([built, built], 2048)
    assert report["over_max_length"] == 2  # 200 + 3000: the whole conversation as the last turn saw it
    assert report["percentiles"]["prompt"]["p50"] == 100
    assert {b["le_tokens"]: b["rows"] for b in report["histogram"]}[4096] == 2
    assert length_report([built], 4096)["over_max_length"] == 0
