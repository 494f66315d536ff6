"""Per-row checks of a generated answer, kept as flags in `meta` and counted in the summary.

Each check is one declarative `Check`: a name (the flag written to the row) and a
predicate over the parsed answer. Flags are stored in the ledger as a bit mask, bit i
for `CHECKS[i]`, so the summary is a cheap aggregate query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from specpilot.generate.rows.repetition import REPETITION_NGRAM, REPETITION_SHARE, is_repetitive
from specpilot.generate.rows.types import Answer

THINK_MARKERS = ("<think>", "</think>")


@dataclass(frozen=True)
class Check:
    flag: str
    description: str
    failed: Callable[[Answer, bool], bool]  # (answer, thinking) -> flag it


CHECKS: tuple[Check, ...] = (
    Check("empty_content", "assistant content is empty", lambda a, thinking: not a.content.strip()),
    Check(
        "missing_reasoning",
        "thinking was on but no reasoning came back",
        lambda a, thinking: thinking and not (a.reasoning or "").strip(),
    ),
    Check(
        "think_markers",
        "a <think>/</think> marker is left in content or reasoning",
        lambda a, thinking: any(m in a.content or m in (a.reasoning or "") for m in THINK_MARKERS),
    ),
    Check(
        "truncated",
        "finish_reason is 'length' (hit --max-tokens)",
        lambda a, thinking: a.finish_reason == "length",
    ),
    # appended: a flag's bit is its index, kept in ledgers already written
    Check(
        "no_finish_reason",
        "the server gave no finish_reason: the answer may have been cut off",
        lambda a, thinking: a.finish_reason is None,
    ),
    Check(
        "repetitive",
        f"the answer loops: over {REPETITION_SHARE:.0%} of its {REPETITION_NGRAM}-word sequences repeat",
        lambda a, thinking: is_repetitive(f"{a.reasoning or ''}\n{a.content}"),
    ),
)
FLAG_NAMES: tuple[str, ...] = tuple(check.flag for check in CHECKS)


def answer_flags(answer: Answer, thinking: bool) -> list[str]:
    return [check.flag for check in CHECKS if check.failed(answer, thinking)]


def flag_bits(flags: Iterable[str]) -> int:
    bits = 0
    for flag in flags:
        if flag in FLAG_NAMES:
            bits |= 1 << FLAG_NAMES.index(flag)
    return bits
