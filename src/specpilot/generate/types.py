"""Small value types shared by the generate modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
"""One chat message as the OpenAI API takes it: at least `role` and `content`."""


@dataclass(frozen=True, slots=True)
class PromptRow:
    """One input row: its position in the input, its id, the turns sent and kept.

    `turns` are the conversation as it will appear in the output before the new
    assistant turn; they are also exactly the messages sent to the server.
    """

    position: int
    row_id: str
    turns: list[Message]
