"""An input conversation checked and cut into the turns the target will write.

By default every assistant turn is the target's own, as SpecForge's and speculators'
regeneration scripts do: the given assistant turns only mark where an answer goes, and
turn k is generated from the conversation so far *as the target produced it*. So the
conversation is cut into segments, each the non-assistant messages (system, user) that
precede one target turn:

    [system, user1, assistant1, user2]  ->  segments [[system, user1], [user2]]

With `keep_given_turns` the given assistant turns (and tool messages) stay as context
and only the final answer is generated: one segment, the whole given conversation.

A row that cannot be used raises `RowRejected` with what is wrong and the fix; the
job skips it and counts it, the other rows are unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specpilot.generate.rows.types import Message

SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
}
ROW_FIELDS = frozenset({"id", "conversations", "messages", "prompt", "tools"})
#: a turn's fields kept beyond its role and content, in the order they are kept
EXTRA_TURN_FIELDS = ("reasoning_content", "tool_calls", "tool_call_id", "name")
PLAIN_TURN_FIELDS = frozenset({"role", "from", "content", "value"})
TURN_FIELDS = PLAIN_TURN_FIELDS | frozenset(EXTRA_TURN_FIELDS)
TURNS_FIX = 'write it as [{"role": "user", "content": "..."}, ...]'


class RowRejected(Exception):
    """One input row that cannot be generated: what is wrong and the fix."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


@dataclass(frozen=True, slots=True)
class Conversation:
    """The messages before each target turn, and the row's tool definitions."""

    segments: list[list[Message]]
    tools: list[Any] | None


def check_row_fields(record: dict[str, Any], *, strict: bool) -> tuple[str, ...]:
    """The row's fields specpilot does not read (`source`, `category`: users' files carry
    them), ignored; with `strict` the first one rejects the row."""
    if ROW_FIELDS.issuperset(record):  # the common row: no set built, nothing sorted
        return ()
    unknown = tuple(sorted(set(record) - ROW_FIELDS))
    if strict:
        raise RowRejected(
            f"unknown field {unknown[0]!r}",
            f"remove it (a row has {', '.join(sorted(ROW_FIELDS))}), or drop --strict to ignore such fields",
        )
    return unknown


def normalize_turns(value: Any, key: str) -> list[Message]:
    """ShareGPT or OpenAI turns as OpenAI messages; RowRejected if one is malformed."""
    if not isinstance(value, list) or not value:
        raise RowRejected(f"'{key}' is not a non-empty list of turns", TURNS_FIX)
    return [_normalize_turn(index, turn) for index, turn in enumerate(value)]


def _normalize_turn(index: int, turn: Any) -> Message:
    """One turn as an OpenAI message: its role mapped, its content, its extra fields kept."""
    if not isinstance(turn, dict):
        raise RowRejected(f"turn {index} is not an object", TURNS_FIX)
    _check_turn_fields(index, turn)
    given_role = turn.get("role") or turn.get("from")
    role = SHAREGPT_ROLES.get(str(given_role))
    if role is None:
        raise RowRejected(f"turn {index} has role {given_role!r}", "use system, user, assistant or tool")
    content = turn.get("content")
    kept: Message = {"role": role, "content": turn.get("value") if content is None else content}
    if not PLAIN_TURN_FIELDS.issuperset(turn):
        kept.update((extra, turn[extra]) for extra in EXTRA_TURN_FIELDS if turn.get(extra) is not None)
    if role != "assistant" and not _has_text(kept):
        raise RowRejected(f"turn {index} ({role}) has empty content", "give it text, or remove the turn")
    return kept


def _check_turn_fields(index: int, turn: dict[str, Any]) -> None:
    """RowRejected naming the turn's first unknown field that is set (a None one is ignored)."""
    if TURN_FIELDS.issuperset(turn):  # the common turn builds no set
        return
    unknown = sorted(k for k in set(turn) - TURN_FIELDS if turn[k] is not None)
    if unknown:
        raise RowRejected(
            f"turn {index} has unknown field {unknown[0]!r}",
            f"remove it (a turn has {', '.join(sorted(TURN_FIELDS))})",
        )


def _has_text(turn: Message) -> bool:
    content = turn.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    return bool(content)  # multimodal parts: a non-empty list


def plan_conversation(turns: list[Message], tools: Any, *, keep_given_turns: bool) -> Conversation:
    """Check the role order and cut `turns` into segments (see the module docstring)."""
    if tools is not None and not isinstance(tools, list):
        raise RowRejected("'tools' is not a list", 'write it as [{"type": "function", "function": {...}}]')
    _check_order(turns)
    if keep_given_turns:
        _check_given_answers(turns)
        return Conversation([turns], tools)
    if "tool" in {t["role"] for t in turns}:
        raise RowRejected(
            "tool results answer the given assistant's calls, which the target's own turns would not make",
            "pass --keep-given-turns to keep the given turns as context and generate only the last answer",
        )
    return Conversation(_cut_at_answers(turns), tools)


def _check_given_answers(turns: list[Message]) -> None:
    """With the given turns kept: the conversation ends with a turn to answer, and every
    given answer has text or tool calls."""
    if turns[-1]["role"] == "assistant":
        raise RowRejected(
            "the last turn is the assistant's: nothing to generate",
            "end with the user turn to answer, or drop --keep-given-turns to regenerate every answer",
        )
    for index, turn in enumerate(turns):
        if turn["role"] == "assistant" and not (_has_text(turn) or turn.get("tool_calls")):
            raise RowRejected(
                f"turn {index} (assistant) has empty content",
                "give it text, or drop --keep-given-turns to have the target write it",
            )


def _cut_at_answers(turns: list[Message]) -> list[list[Message]]:
    """The non-assistant turns before each assistant turn, and those after the last one."""
    segments: list[list[Message]] = [[]]
    for turn in turns:
        if turn["role"] == "assistant":
            segments.append([])
        else:
            segments[-1].append(turn)
    if not segments[-1]:
        segments.pop()  # the conversation ended with an assistant turn: it is regenerated too
    return segments


def _check_order(turns: list[Message]) -> None:
    """system first (optional), then user/assistant alternating; tool only after a call."""
    previous = None
    for index, turn in enumerate(turns):
        role = turn["role"]
        allowed = _ALLOWED_AFTER[previous]
        if role == "tool" and previous == "assistant" and not turns[index - 1].get("tool_calls"):
            allowed = allowed - {"tool"}
        if role not in allowed:
            raise RowRejected(_order_problem(index, role, previous), _ORDER_FIX)
        previous = role
    if "user" not in {t["role"] for t in turns}:
        raise RowRejected("the conversation has no user turn", _ORDER_FIX)


_ORDER_FIX = (
    "order the turns system (optional), user, assistant, user, ... (tool only after an assistant call)"
)
_ALLOWED_AFTER: dict[str | None, frozenset[str]] = {
    None: frozenset({"system", "user"}),
    "system": frozenset({"user"}),
    "user": frozenset({"assistant"}),
    "assistant": frozenset({"user", "tool"}),
    "tool": frozenset({"tool", "assistant"}),
}


#: the fast path's roles and order: no tool turns (they carry more than two fields)
_PLAIN_ROLES = {given: role for given, role in SHAREGPT_ROLES.items() if role != "tool"}
_PLAIN_AFTER = {before: roles - {"tool"} for before, roles in _ALLOWED_AFTER.items() if before != "tool"}


#: the roles whose plain turn must hold text: with the given answers kept, the answers too
_PLAIN_TEXT_ROLES = {False: frozenset({"system", "user"}), True: frozenset({"system", "user", "assistant"})}


def plain_segments(value: Any, *, keep_given_turns: bool) -> list[list[Message]] | None:
    """The segments of the common conversation, checked in one pass: a list of two-field turns
    (`{"role", "content"}` or ShareGPT's `{"from", "value"}`) of system, user and assistant
    text, in order. None for any other: `normalize_turns` and `plan_conversation` then give the
    same segments, or the rejection (a 902k-row listing spends a third of their time here)."""
    if type(value) is not list or not value:
        return None
    turns = _plain_turns(value, _PLAIN_TEXT_ROLES[keep_given_turns])
    if turns is None:
        return None
    last = turns[-1]["role"]
    if last == "system":  # [system] alone: no user turn (any longer order has one)
        return None
    if keep_given_turns:
        return None if last == "assistant" else [turns]
    return _cut_at_answers(turns)


def _plain_turns(value: list[Any], text_roles: frozenset[str]) -> list[Message] | None:
    """`value`'s turns as messages if each is plain, in order, and holds text where its role
    in `text_roles` needs it; None for any other. One loop, no call per turn: the hot path."""
    turns: list[Message] = []
    previous: str | None = None
    for turn in value:
        if type(turn) is not dict or len(turn) != 2:
            return None
        # of two fields one is the role and one the text: a null or empty "role" (or "content")
        # leaves no "from" ("value") to read, so no `or` is needed
        given_role = turn.get("role", turn.get("from"))
        content = turn.get("content", turn.get("value"))
        role = _PLAIN_ROLES.get(given_role) if type(given_role) is str else None
        if type(content) is not str or role not in _PLAIN_AFTER[previous]:  # no None role there
            return None
        if role in text_roles and (not content or content.isspace()):
            return None  # empty text (an empty answer only when the given answers are kept)
        turns.append({"role": role, "content": content})
        previous = role
    return turns


def _order_problem(index: int, role: str, previous: str | None) -> str:
    if role == "tool":
        return f"turn {index} is a tool result without an assistant tool call before it"
    where = "first" if previous is None else f"after a {previous} turn"
    return f"turn {index} ({role}) is out of order: {role} cannot come {where}"
