"""Which `--reasoning-parser` a model family needs, per engine and release, as data.

Without one, SGLang and vLLM return a thinking model's reasoning inline in `content`
(`<think>...</think>`), so a drafter-data job gets no `reasoning_content`. Names are
the engines' registries: SGLang's `ReasoningParser.DetectorMap`
(python/sglang/srt/parser/reasoning_parser.py, the `--reasoning-parser` choices in the
flag tables) and vLLM's `ReasoningParserManager` registrations
(vllm/reasoning/__init__.py), https://github.com/sgl-project/sglang and
https://github.com/vllm-project/vllm.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from specpilot.engines.fix import Fix
from specpilot.engines.rules import Context, Rule

#: Qwen3, Qwen3-MoE, Qwen3-Next, Qwen3.5/3.6 (dense and MoE): all think between <think> and </think>
QWEN3_ARCHS: frozenset[str] = frozenset(
    {
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    }
)


@dataclass(frozen=True)
class ReasoningParser:
    """The parser `engine` releases in `versions` need for the `architectures`' output."""

    engine: str
    versions: SpecifierSet
    architectures: frozenset[str]
    name: str
    family: str


REASONING_PARSERS: tuple[ReasoningParser, ...] = (
    ReasoningParser("sglang", SpecifierSet(">=0.5.10"), QWEN3_ARCHS, "qwen3", "Qwen3.x"),
    ReasoningParser("vllm", SpecifierSet(">=0.21"), QWEN3_ARCHS, "qwen3", "Qwen3.x"),
)


def reasoning_parser_for(engine: str, version: Version, architecture: str | None) -> ReasoningParser | None:
    for parser in REASONING_PARSERS:
        if (
            parser.engine == engine
            and architecture in parser.architectures
            and parser.versions.contains(version, prereleases=True)
        ):
            return parser
    return None


def needs_reasoning_parser(ctx: Context) -> bool:
    """A thinking model whose launch sets no `--reasoning-parser`."""
    return not ctx.get("reasoning_parser") and (
        reasoning_parser_for(ctx.engine, ctx.version, ctx.architecture) is not None
    )


def reasoning_parser_fix(ctx: Context) -> Fix:
    parser = reasoning_parser_for(ctx.engine, ctx.version, ctx.architecture)
    assert parser is not None  # the rule fires only for a known family
    return Fix(args=("--reasoning-parser", parser.name))


def missing_parser_rule(engine: str, versions: SpecifierSet) -> Rule:
    """The same warning for every engine: its parser names come from REASONING_PARSERS."""
    return Rule(
        f"{engine}-reasoning-parser-missing",
        engine,
        versions,
        "warning",
        needs_reasoning_parser,
        "{arch} thinks between <think> and </think>: without --reasoning-parser the server returns "
        "that inline in content, not as reasoning_content (`specpilot up` adds the flag)",
        reasoning_parser_fix,
        why="drafter training data needs reasoning_content; history sent back must not carry the think block",
        up_applies=True,
    )
