"""Which SpecForge chat template renders the rows as the target saw them, as data.

SpecForge renders each row with a named template from its registry
(`specforge/data/template.py`, https://github.com/sgl-project/SpecForge). Some names
silently change the training text: `qwen` renders only `content` (every reasoning
trace is dropped) and, like `qwen3-thinking`, inserts the system prompt "You are a
helpful assistant." into every row without one: text the target never saw. `qwen3.5`
renders `reasoning_content` inside `<think>...</think>` and adds no system prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specpilot.errors import UserError


@dataclass(frozen=True)
class TrainerTurns:
    """Where SpecForge's loss finds an assistant turn in the model's rendered chat template (its
    `ChatTemplate`): from after `assistant_header` through `end_of_turn`, reasoning kept by its
    thinking parser, rendered with `enable_thinking` when it sets it."""

    assistant_header: str
    end_of_turn: str
    enable_thinking: bool


@dataclass(frozen=True)
class TemplateRule:
    name: str
    refused_because: str | None  # None: renders the rows as the target produced them
    #: how SpecForge supervises a turn with it (the train-ready check renders the same)
    turns: TrainerTurns | None = None


TEMPLATE_RULES = {
    rule.name: rule
    for rule in (
        TemplateRule("qwen3.5", None, TrainerTurns("<|im_start|>assistant\n<think>\n", "<|im_end|>\n", True)),
        TemplateRule(
            "qwen",
            "it drops every reasoning trace and adds a system prompt the model never saw",
        ),
        TemplateRule(
            "qwen3-thinking", "it adds the system prompt 'You are a helpful assistant.' the model never saw"
        ),
        TemplateRule(
            "qwen3-instruct", "it adds the system prompt 'You are a helpful assistant.' the model never saw"
        ),
    )
}
#: every name in SpecForge 0.2.0's TEMPLATE_REGISTRY (`custom` is the example's placeholder)
SPECFORGE_TEMPLATES = frozenset(
    {
        "llama3", "llama4", "qwen", "lfm", "phi3", "phi4", "phi4-mini", "gpt-oss-naive", "gpt-oss",
        "deepseek-r1-distill", "qwen3-thinking", "qwen3-instruct", "qwen3-next-thinking",
        "kimi-k2-thinking", "kimi-k2-instruct", "kimi-k3-thinking", "deepseek-v3", "deepseek-v2",
        "ling-flash-2.0", "deepseek-v32", "glm-5.2", "gemma", "longcat", "longcat_xml", "qwen3.5",
        "inkling-thinking",
    }
)  # fmt: skip
#: model name pattern -> the template its rows need
RECOMMENDED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"qwen3[._-]?[56]", re.IGNORECASE), "qwen3.5"),
)


def recommended_template(model: str | None) -> str | None:
    for pattern, name in RECOMMENDED:
        if model and pattern.search(model):
            return name
    return None


def choose_template(requested: str | None, model: str | None) -> tuple[str | None, list[str]]:
    """(template to state, warnings); UserError for a template that would change the text."""
    recommended = recommended_template(model)
    name = requested or recommended
    if name is None:
        return None, [
            f"no known SpecForge template for model {model!r}: choose one that renders "
            "reasoning_content like the model's own chat template and adds no system prompt"
        ]
    rule = TEMPLATE_RULES.get(name)
    if rule is None and name not in SPECFORGE_TEMPLATES:
        raise UserError(
            f"SpecForge has no chat template {name!r}",
            field="--chat-template",
            fix=f"use one of its registry's names, {recommended or 'qwen3.5'} for this model",
        )
    if rule is None:
        return name, [
            f"specpilot does not know SpecForge template {name!r}: check it keeps reasoning_content"
        ]
    if rule.refused_because is not None:
        raise UserError(
            f"chat template {name!r} would not train on what the model wrote: {rule.refused_because}",
            field="--chat-template",
            fix=f"use --chat-template {recommended or 'qwen3.5'}",
        )
    return name, []
