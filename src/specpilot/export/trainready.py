"""The train-ready check: exported rows, rendered as the trainer renders them, must re-tokenize to
the token counts the server reported for each target turn.

A sample of the exported rows (`SAMPLE_ROWS`, the same ones every time: the smallest hashes of
their ids; every row when fewer) is rendered with the model's chat template the way the trainer
does, each target turn as the last turn of the conversation up to it (a `--per-turn` row):

* SpecForge with a template whose turn markers specpilot knows (`templates.TrainerTurns`,
  `qwen3.5`): the whole row rendered, the turn being what SpecForge's loss covers, from after
  the template's assistant header through its end of turn (`<|im_end|>\\n`);
* otherwise (speculators, Parquet, hf, or a SpecForge template specpilot does not know): the
  model's own template, the turn being the text after the prompt the model was sent (the
  conversation before it with the generation prompt).

The tokens of that text are compared with the turn's `completion_tokens` (`meta.turns[]`, from
the server's usage). They match within the template's own end of turn, the text it writes after
the answer (`<|im_end|>\\n` for ChatML: the server counts the stop token `<|im_end|>` it
generated, or not, by engine; the newline is the template's alone), plus `RETOKENIZE_SHARE` of
the turn (sampled text may be tokens a tokenizer would merge otherwise). A larger difference is
a template that drops or moves the reasoning, or reasoning the server's split lost: a drafter
trained on those rows learns text the model never wrote.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.export.formats import ExportFormat
from specpilot.export.templates import TEMPLATE_RULES, TrainerTurns, recommended_template
from specpilot.export.tokenizer import ChatTokenizer, Unreadable, is_tokenizer_folder, load_tokenizer
from specpilot.generate.ledger.report import reading_ledger
from specpilot.generate.writers.committed import committed_rows
from specpilot.generate.writers.parts import Split

#: rows rendered and re-tokenized (all of them when the export has fewer)
SAMPLE_ROWS = 64
#: share of a turn's tokens re-tokenizing may move (sampled text is not always the tokenizer's split)
RETOKENIZE_SHARE = 0.01
#: the turn fields a chat template reads
_TURN_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")
#: an answer no template writes, to find what the template writes after an answer
_PROBE = "specpilot-train-ready-probe"
FIX = (
    "train with the template the model was served with: check --chat-template, the tokenizer "
    "(--tokenizer DIR) and the engine's reasoning parser, then export again; "
    "--no-train-check exports without the check"
)


@dataclass(frozen=True)
class Mismatch:
    row_id: str
    turn: int  # index in `conversations`
    counted_tokens: int  # what the trainer sees
    reported_tokens: int  # the server's completion_tokens
    side: str  # "reasoning" | "answer" | "template" | "unknown"
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.row_id,
            "turn": self.turn,
            "counted_tokens": self.counted_tokens,
            "reported_tokens": self.reported_tokens,
            "side": self.side,
            "why": self.why,
        }


@dataclass
class TrainReady:
    """The check's outcome: `skipped` (why) or the turns checked and the first that differs."""

    skipped: str | None = None
    rendered_with: str | None = None
    tokenizer: str | None = None
    end_of_turn: str | None = None
    end_of_turn_tokens: int = 0
    checked_rows: int = 0
    checked_turns: int = 0
    mismatches: int = 0
    first_mismatch: Mismatch | None = None

    @property
    def failed(self) -> bool:
        return self.mismatches > 0

    def to_json(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"skipped": self.skipped}
        return {
            "rendered_with": self.rendered_with,
            "tokenizer": self.tokenizer,
            "end_of_turn": self.end_of_turn,
            "end_of_turn_tokens": self.end_of_turn_tokens,
            "retokenize_share": RETOKENIZE_SHARE,
            "checked_rows": self.checked_rows,
            "checked_turns": self.checked_turns,
            "mismatches": self.mismatches,
            "first_mismatch": None if self.first_mismatch is None else self.first_mismatch.to_json(),
        }

    def line(self) -> str:
        if self.skipped is not None:
            return f"train-ready check: skipped ({self.skipped})"
        turns, rows = self.checked_turns, self.checked_rows
        checked = f"{turns} target turns of {rows} rows rendered with {self.rendered_with}"
        if self.first_mismatch is None:
            return (
                f"train-ready check: {checked} re-tokenize to the server's completion_tokens "
                f"(within the end of turn {self.end_of_turn!r}, {self.end_of_turn_tokens} tokens, "
                f"and {RETOKENIZE_SHARE:.0%})"
            )
        first = self.first_mismatch
        return (
            f"train-ready check: {self.mismatches} of {checked} do not re-tokenize to the server's "
            f"completion_tokens; first: row {first.row_id!r} turn {first.turn}: the trainer sees "
            f"{first.counted_tokens} tokens, the server wrote {first.reported_tokens} "
            f"({first.side}: {first.why})"
        )


def find_tokenizer(given: Path | None, model: str | None) -> Path:
    """The folder to read: `given`, else the job's model when it names a local tokenizer folder."""
    if given is not None:
        return given
    if model and is_tokenizer_folder(Path(model).expanduser()):
        return Path(model).expanduser()
    raise Unreadable(
        f"the job's model {model!r} is not a local folder with tokenizer files; "
        "`specpilot export --tokenizer DIR` checks with one"
    )


def check_export(
    directory: Path,
    fmt: ExportFormat,
    splits: Sequence[Split],
    *,
    tokenizer: Path | None,
    chat_template: str | None,
) -> TrainReady:
    """The check on the rows of `splits` as exported as `fmt` (with `chat_template` if it takes one)."""
    with reading_ledger(directory) as ledger:
        model = ledger.meta().get("model")
    try:
        chat = load_tokenizer(find_tokenizer(tokenizer, model))
    except Unreadable as why:
        return TrainReady(skipped=str(why))
    name, turns = _trainer_turns(fmt, chat_template, model)
    view = _View(chat, turns)
    result = TrainReady(
        rendered_with=f"SpecForge's {name} over the model's chat template"
        if turns
        else "the model's chat template",
        tokenizer=f"{chat.where} ({chat.library})",
    )
    for row in _sample(committed_rows(directory, splits)):
        result.checked_rows += 1
        _check_row(row, view, result)
    result.end_of_turn, result.end_of_turn_tokens = view.end_of_turn, view.end_of_turn_tokens
    return result


def _trainer_turns(
    fmt: ExportFormat, chat_template: str | None, model: str | None
) -> tuple[str | None, TrainerTurns | None]:
    """The SpecForge template the export states (`chat_template`, else the model's) and how its
    trainer finds the turns; (None, None) for a format that states none."""
    name = (chat_template or recommended_template(model)) if fmt.takes_template else None
    rule = TEMPLATE_RULES.get(name) if name else None
    return name, rule.turns if rule is not None else None


def _check_row(row: dict[str, Any], view: _View, result: TrainReady) -> None:
    """Compare each target turn of `row` the server counted with the trainer's view of it."""
    for meta_turn in (row.get("meta") or {}).get("turns") or []:
        reported = int(meta_turn.get("completion_tokens") or 0)
        if not reported:
            continue  # the server reported no usage for it: nothing to compare with
        result.checked_turns += 1
        mismatch = view.compare(row, meta_turn, reported)
        if mismatch is not None:
            result.mismatches += 1
            result.first_mismatch = result.first_mismatch or mismatch


def _sample(rows: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    """`SAMPLE_ROWS` rows in export order, the same for the same rows (smallest id hashes)."""
    keyed = ((hashlib.sha256(row["id"].encode()).digest(), order, row) for order, row in enumerate(rows))
    chosen = heapq.nsmallest(SAMPLE_ROWS, keyed, key=lambda item: item[:2])
    return [row for _, _, row in sorted(chosen, key=lambda item: item[1])]


def _message(turn: dict[str, Any]) -> dict[str, Any]:
    message = {key: turn[key] for key in _TURN_KEYS if turn.get(key) is not None}
    message["content"] = turn.get("content") or ""
    return message


class _View:
    """One turn as the trainer sees it, counted."""

    def __init__(self, chat: ChatTokenizer, turns: TrainerTurns | None) -> None:
        self.chat, self.turns = chat, turns
        self.end_of_turn: str | None = None
        self.end_of_turn_tokens = 0
        if turns is not None:
            self.pattern = re.compile(
                re.escape(turns.assistant_header) + rf"([\s\S]*?(?:{re.escape(turns.end_of_turn)}|$))"
            )

    def kwargs(self, thinking: bool) -> dict[str, Any]:
        if self.turns is not None:
            return {"enable_thinking": True} if self.turns.enable_thinking else {}
        return {"enable_thinking": thinking}

    def find_end_of_turn(self, kwargs: dict[str, Any]) -> None:
        """What the template writes after an answer (SpecForge's: its end_of_turn), once."""
        if self.end_of_turn is not None:
            return
        if self.turns is not None:
            self.end_of_turn = self.turns.end_of_turn
        else:
            probe = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _PROBE}]
            text = self.chat.render(probe, None, False, kwargs)
            self.end_of_turn = text[text.rfind(_PROBE) + len(_PROBE) :] if _PROBE in text else ""
        self.end_of_turn_tokens = self.chat.count(self.end_of_turn)

    def compare(self, row: dict[str, Any], meta_turn: dict[str, Any], reported: int) -> Mismatch | None:
        index = int(meta_turn["index"])
        conversation = [_message(t) for t in row["conversations"][: index + 1]]
        tools = row.get("tools") or None
        kwargs = self.kwargs(bool((row.get("meta") or {}).get("thinking")))
        self.find_end_of_turn(kwargs)
        span, counted, why = self._span(conversation, tools, kwargs)
        slack = math.ceil(reported * RETOKENIZE_SHARE)
        if why is None and reported - slack <= counted <= reported + self.end_of_turn_tokens + slack:
            return None
        side, why = (
            ("template", why)
            if why
            else _side(conversation[-1], meta_turn, span, counted, reported, self.chat)
        )
        return Mismatch(str(row["id"]), index, counted, reported, side, why)

    def _span(
        self, conversation: list[dict[str, Any]], tools: list[Any] | None, kwargs: dict[str, Any]
    ) -> tuple[str, int, str | None]:
        """(the turn's text as trained, its tokens, why there is none)."""
        chat = self.chat
        if self.turns is not None:
            text = chat.render(conversation, tools, False, kwargs)
            found = list(self.pattern.finditer(text))
            if not found or text[found[-1].end() :].strip():
                return (
                    "",
                    0,
                    (
                        f"SpecForge's assistant header {self.turns.assistant_header!r} does not start this "
                        "turn in the rendered row: no token of it is in the loss"
                    ),
                )
            start, end = found[-1].span(1)
            return text[start:end], chat.count(text[:end]) - chat.count(text[:start]), None
        prompt = chat.render(conversation[:-1], tools, True, kwargs)
        text = chat.render(conversation, tools, False, kwargs)
        if not text.startswith(prompt):
            return (
                "",
                0,
                (
                    "the chat template renders the conversation before the turn differently once the turn "
                    "follows it: the trainer's context is not the prompt the model was sent"
                ),
            )
        return text[len(prompt) :], chat.count(text) - chat.count(prompt), None


def _side(
    turn: dict[str, Any],
    meta_turn: dict[str, Any],
    span: str,
    counted: int,
    reported: int,
    chat: ChatTokenizer,
) -> tuple[str, str]:
    """Which side of the reasoning split differs, where the row tells."""
    reasoning, content = (turn.get("reasoning_content") or "").strip(), turn["content"].strip()
    left_out = _left_out_side(reasoning, content, span, counted, reported, chat)
    return left_out if left_out is not None else _miscounted_side(reasoning, content, meta_turn, chat)


def _left_out_side(
    reasoning: str, content: str, span: str, counted: int, reported: int, chat: ChatTokenizer
) -> tuple[str, str] | None:
    """The side whose text the trainer's span lacks, or None."""
    if reasoning and reasoning not in span:
        return "reasoning", (
            f"the trainer's text leaves out the turn's reasoning_content ({chat.count(reasoning)} tokens)"
        )
    if content and content not in span:
        return "answer", "the trainer's text leaves out the turn's content"
    if not reasoning and counted < reported:
        return "reasoning", (
            "the row holds no reasoning_content and the trainer sees fewer tokens than the server wrote: "
            "the reasoning was lost before the row was written"
        )
    return None


def _miscounted_side(
    reasoning: str, content: str, meta_turn: dict[str, Any], chat: ChatTokenizer
) -> tuple[str, str]:
    """With every text in the span: the side whose count differs most from the server's."""
    if "</think>" in content:
        return "answer", "the answer holds '</think>': its reasoning was not split from it"
    if not meta_turn.get("tokens_estimated"):
        counts = {"reasoning": chat.count(reasoning), "answer": chat.count(content)}
        server = {
            "reasoning": meta_turn.get("reasoning_tokens") or 0,
            "answer": meta_turn.get("answer_tokens") or 0,
        }
        side = max(counts, key=lambda s: abs(counts[s] - server[s]))
        return side, f"re-tokenized {counts[side]} {side} tokens, the server counted {server[side]}"
    return "unknown", "the rendered turn is not the text the server wrote"
