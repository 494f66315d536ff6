"""Inline thinking split out of `content`, whatever the server's reasoning parser does.

A server started without `--reasoning-parser` returns the model's thinking inside
`content`. Which markers a model thinks between is a fact of its chat template, kept
as data per model family (`FAMILIES`). Two shapes reach us:

    "<think>\\nR\\n</think>\\n\\nA"   the template leaves the opening marker to the model
    "R\\n</think>\\n\\nA"             Qwen3.5/3.6: the generation prompt ends with `<think>\\n`

Both become reasoning "R" and content "A", the split a server's `--reasoning-parser`
makes. The whitespace around the markers is stripped: the chat template writes it back
when the row is rendered for training, so the rendered text is what the model wrote.
An answer that opened the marker and was cut off before the closing one is all reasoning.
`ReasoningWatch` stops a job whose first finished answers all come back without reasoning
although thinking is on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ThinkMarkers:
    """A model family whose template wraps reasoning in `open`...`close`."""

    family: str
    model_pattern: re.Pattern[str]
    open: str = "<think>"
    close: str = "</think>"


FAMILIES: tuple[ThinkMarkers, ...] = (
    ThinkMarkers("Qwen3.x", re.compile(r"qwen3|qwq", re.IGNORECASE)),
    ThinkMarkers("DeepSeek-R1", re.compile(r"deepseek[-_]?r1", re.IGNORECASE)),
)
#: answers with thinking on that may all lack reasoning before the job stops
NO_REASONING_LIMIT = 20


def markers_for(model: str) -> ThinkMarkers | None:
    for markers in FAMILIES:
        if markers.model_pattern.search(model):
            return markers
    return None


def split_inline(
    content: str, finish_reason: str | None, markers: ThinkMarkers, *, thinking: bool
) -> tuple[str, str] | None:
    """(reasoning, content) of an answer whose thinking is inline in `content`; None if it is not."""
    opened = content.lstrip().startswith(markers.open)
    if markers.close in content:
        reasoning, _, content = content.partition(markers.close)
    elif thinking and opened:
        # cut off while thinking; a cut answer that never opened the marker stays content (it
        # may be the answer itself: making it reasoning would hide a server without a parser)
        reasoning, content = content, ""
    else:
        return None
    reasoning = reasoning.strip()
    if reasoning.startswith(markers.open):
        reasoning = reasoning[len(markers.open) :].strip()
    return reasoning, content.strip()


class ReasoningWatch:
    """Sees every answer of a run with thinking on; names the cause once the first
    `limit` answers all came back without reasoning."""

    def __init__(self, model: str, *, thinking: bool, limit: int = NO_REASONING_LIMIT) -> None:
        self._model = model
        self._limit = limit
        self._without = 0
        self._watching = thinking

    def observe(self, reasoning: str | None, finish_reason: str | None = "stop") -> str | None:
        """The reason to stop, once; None otherwise. Only finished answers count: a cut-off
        one says nothing about the server's reasoning parser."""
        if not self._watching or finish_reason == "length":
            return None
        if (reasoning or "").strip():
            self._watching = False
            return None
        self._without += 1
        if self._without < self._limit:
            return None
        self._watching = False
        markers = markers_for(self._model)
        known = (
            f"and no {markers.open}...{markers.close} in content to split"
            if markers
            else f"and specpilot knows no think markers for model {self._model!r}"
        )
        return (
            f"the first {self._limit} finished answers all came back without reasoning "
            "although thinking is on "
            f"(no reasoning_content {known}): start the server with its reasoning parser "
            "(`--reasoning-parser qwen3` for Qwen3.x; `specpilot check` names it), or pass "
            "--no-thinking for a model that does not think; then run the same command again"
        )
