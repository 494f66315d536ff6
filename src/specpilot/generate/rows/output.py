"""The output row: the conversation with every target turn in place, and its `meta`.

One row per input row, written once when all its target turns are done:

    {"id", "conversations": [..., {"role": "assistant", "content", "reasoning_content"
     [, "tool_calls"]}, ...], ["tools",] "status": "success", "meta": {...}}

Strings are never null (`reasoning_content` is "" with thinking off), `status` is what
SpecForge's validation script requires, and `meta.target_turns` lists the indices of
the turns the target wrote. `META_FIELDS` / `TURN_FIELDS` are the documented keys (the
README's table is tested against them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specpilot.generate.rows.types import Answer, Message, PromptRow
from specpilot.generate.rows.validate import FLAG_NAMES, answer_flags

#: what a row's meta and each of its turns both carry, in this order
ANSWER_FIELDS = (
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "answer_tokens",
    "tokens_estimated",
    "server",
    "spec_accept_length",
    "reasoning_split",
    "flags",
)
META_FIELDS = ("model", "thinking", "keep_given_turns", "target_turns", *ANSWER_FIELDS, "turns")
TURN_FIELDS = ("index", *ANSWER_FIELDS)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """One target turn: the server's answer, which server gave it, and how long it took."""

    answer: Answer
    server: str
    latency_s: float = 0.0


def assistant_turn(answer: Answer) -> Message:
    turn: Message = {
        "role": "assistant",
        "content": answer.content,
        "reasoning_content": answer.reasoning or "",
    }
    if answer.tool_calls:
        turn["tool_calls"] = answer.tool_calls
    return turn


def history_turn(answer: Answer) -> Message:
    """An earlier target turn as the next request carries it: without its reasoning.

    SpecForge's and speculators' regeneration send history this way, and Qwen3.x chat
    templates drop earlier turns' reasoning anyway (Qwen3.6 unless `preserve_thinking`);
    the row itself keeps every turn's reasoning.
    """
    turn = assistant_turn(answer)
    del turn["reasoning_content"]
    return turn


def turn_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target turn: the conversation up to and including it.

    Earlier turns keep their reasoning (SpecForge's validation wants it on every assistant
    message); the chat template drops it from history as it did when the target was asked,
    so the rendered context is what the server was sent. Its id is `<row id>#<turn index>`;
    [] when the row records no target turns.
    """
    targets = sorted((row.get("meta") or {}).get("target_turns") or ())
    conversation = row["conversations"]
    return [{**row, "id": f"{row['id']}#{i}", "conversations": conversation[: i + 1]} for i in targets]


def messages_for(row: PromptRow, done: list[TurnResult]) -> list[Message]:
    """What is sent for the next target turn: the conversation so far as the target wrote it."""
    messages: list[Message] = []
    for segment, result in zip(row.segments, done, strict=False):
        messages += segment
        messages.append(history_turn(result.answer))
    return messages + row.segments[len(done)]


def is_complete(row: PromptRow, done: list[TurnResult]) -> bool:
    """All turns done, or the last one was cut off: later turns would follow text the model never finished."""
    return len(done) == len(row.segments) or (bool(done) and done[-1].answer.finish_reason == "length")


def split_tokens(answer: Answer) -> tuple[int, int, bool]:
    """(reasoning, answer, estimated): the server's split of completion_tokens, else by characters."""
    total = answer.completion_tokens
    if answer.reasoning_tokens is not None:
        reasoning = min(answer.reasoning_tokens, total)
        return reasoning, total - reasoning, False
    reasoning_chars, content_chars = len(answer.reasoning or ""), len(answer.content)
    if not reasoning_chars:
        return 0, total, False
    reasoning = round(total * reasoning_chars / (reasoning_chars + content_chars))
    return reasoning, total - reasoning, True


def _turn_meta(index: int, result: TurnResult, thinking: bool) -> dict[str, Any]:
    answer = result.answer
    reasoning, content, estimated = split_tokens(answer)
    return {
        "index": index,
        "finish_reason": answer.finish_reason,
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "reasoning_tokens": reasoning,
        "answer_tokens": content,
        "tokens_estimated": estimated,
        "server": result.server,
        "spec_accept_length": None
        if answer.spec_accept_length is None
        else round(answer.spec_accept_length, 4),
        "reasoning_split": answer.reasoning_split,
        "flags": answer_flags(answer, thinking),
    }


def build_row(
    row: PromptRow, done: list[TurnResult], *, model: str, thinking: bool, keep_given_turns: bool
) -> dict[str, Any]:
    """The output row for `row` once `is_complete`."""
    conversation: list[Message] = []
    turns: list[dict[str, Any]] = []
    for segment, result in zip(row.segments, done, strict=False):
        conversation += segment
        turns.append(_turn_meta(len(conversation), result, thinking))
        conversation.append(assistant_turn(result.answer))
    output: dict[str, Any] = {"id": row.row_id, "conversations": conversation}
    if row.tools:
        output["tools"] = row.tools
    output["status"] = "success"
    output["meta"] = {
        "model": model,
        "thinking": thinking,
        "keep_given_turns": keep_given_turns,
        **_row_meta(turns),
    }
    return output


#: the token counts a row's meta sums over its target turns
_SUMMED_TOKENS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "answer_tokens")


def _row_meta(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """The row's meta from its target turns' (after the job's settings), the turns last."""
    last = turns[-1]
    return {
        "target_turns": [t["index"] for t in turns],
        "finish_reason": last["finish_reason"],
        **{key: sum(t[key] for t in turns) for key in _SUMMED_TOKENS},
        "tokens_estimated": any(t["tokens_estimated"] for t in turns),
        "server": last["server"],
        "spec_accept_length": _mean_accept_length(turns),
        "reasoning_split": any(t["reasoning_split"] for t in turns),
        "flags": _row_flags(turns),
        "turns": turns,
    }


def _mean_accept_length(turns: list[dict[str, Any]]) -> float | None:
    """The mean of the turns' spec_accept_length where the server gave one."""
    accepts = [t["spec_accept_length"] for t in turns if t["spec_accept_length"] is not None]
    return round(sum(accepts) / len(accepts), 4) if accepts else None


def _row_flags(turns: list[dict[str, Any]]) -> list[str]:
    """Every flag any turn has, in FLAG_NAMES' order."""
    flags = {flag for turn in turns for flag in turn["flags"]}
    return [flag for flag in FLAG_NAMES if flag in flags]
