"""Row lengths against the trainer's `--max-length`: what a trainer would cut, before training.

Per row, from the servers' `usage`: `prompt` is the first target turn's prompt (the
given context), `reasoning` and `answer` are summed over the target turns, and
`total` is the last turn's prompt plus its completion: the whole conversation as the
server tokenized it, which is what the trainer renders (SpecForge and speculators
truncate past `max_length` without a word). Reasoning tokens come from
`usage.completion_tokens_details.reasoning_tokens` where the server reports them,
else they are estimated from the characters of reasoning vs answer (`estimated_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

BUCKET_TOKENS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
PERCENTILES = (50, 90, 99, 100)


@dataclass(frozen=True, slots=True)
class RowLength:
    prompt: int
    reasoning: int
    answer: int
    total: int
    estimated: bool


def row_length(row: dict[str, Any]) -> RowLength:
    meta = row.get("meta") or {}
    turns = meta.get("turns") or [meta]
    first, last = turns[0], turns[-1]
    completion = int(meta.get("completion_tokens") or 0)
    reasoning = int(meta.get("reasoning_tokens") or 0)
    return RowLength(
        prompt=int(first.get("prompt_tokens") or 0),
        reasoning=reasoning,
        answer=int(meta.get("answer_tokens", completion - reasoning) or 0),
        total=int(last.get("prompt_tokens") or 0) + int(last.get("completion_tokens") or 0),
        estimated=bool(meta.get("tokens_estimated")),
    )


def _percentile(sorted_values: list[int], percent: int) -> int:
    if not sorted_values:
        return 0
    index = min(len(sorted_values) - 1, (len(sorted_values) * percent + 99) // 100 - 1)
    return sorted_values[max(index, 0)]


def length_report(rows: Iterable[dict[str, Any]], max_length_tokens: int | None) -> dict[str, Any]:
    """Counts, percentiles, a histogram of `total`, and the rows over `max_length_tokens`."""
    lengths = [row_length(row) for row in rows]
    return {
        "rows": len(lengths),
        "estimated_rows": sum(length.estimated for length in lengths),
        "percentiles": _percentiles(lengths),
        "histogram": _histogram(lengths),
        "max_length_tokens": max_length_tokens,
        "over_max_length": None
        if max_length_tokens is None
        else sum(length.total > max_length_tokens for length in lengths),
    }


def _histogram(lengths: list[RowLength]) -> list[dict[str, int | None]]:
    """Rows by `total` in BUCKET_TOKENS' buckets (each up to its edge), then those longer."""
    histogram = dict.fromkeys(BUCKET_TOKENS, 0)
    longer = 0
    for length in lengths:
        edge = next((e for e in BUCKET_TOKENS if length.total <= e), None)
        if edge is None:
            longer += 1
        else:
            histogram[edge] += 1
    buckets: list[dict[str, int | None]] = [
        {"le_tokens": edge, "rows": count} for edge, count in histogram.items()
    ]
    return [*buckets, {"le_tokens": None, "rows": longer}]


def _percentiles(lengths: list[RowLength]) -> dict[str, dict[str, int]]:
    """Each column's PERCENTILES."""
    columns = {
        name: sorted(getattr(length, name) for length in lengths)
        for name in ("prompt", "reasoning", "answer", "total")
    }
    return {name: {f"p{p}": _percentile(values, p) for p in PERCENTILES} for name, values in columns.items()}
