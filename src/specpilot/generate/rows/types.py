"""Small value types shared by the generate modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
"""One chat message as the OpenAI API takes it: at least `role` and `content`."""


# not frozen: a frozen dataclass sets each field through object.__setattr__, 0.45 s of CPU
# when a fresh 902k-row job lists its input (nothing changes a row once made)
@dataclass(slots=True)
class PromptRow:
    """One input row: its position in the input, its id, and what the target answers.

    `segments[k]` are the messages (system, user; or with `--keep-given-turns` the
    whole given conversation) that come before the target's k-th turn; turn k is
    generated from `segments[0] + answer0 + ... + segments[k]` (see `turns.py`).
    """

    position: int
    row_id: str
    segments: list[list[Message]]
    tools: list[Any] | None = None
    #: the row's fields specpilot does not read, ignored (the job counts them in one line)
    ignored_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RejectedRow:
    """An input row the job skips: where it is, its id if it has one, and why."""

    position: int
    where: str
    row_id: str | None
    problem: str
    fix: str

    def line(self) -> str:
        name = f" (id {self.row_id})" if self.row_id else ""
        return f"{self.where}{name}: {self.problem}; {self.fix}"


@dataclass(frozen=True, slots=True)
class Answer:
    content: str
    reasoning: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    spec_accept_length: float | None
    reasoning_tokens: int | None = None  # only where the server reports them
    tool_calls: list[Any] | None = None
    #: specpilot moved inline thinking out of `content` (see `thinking.py`)
    reasoning_split: bool = False
    #: the answer carried no `usage`: its token counts are 0, not measured
    usage_missing: bool = False
