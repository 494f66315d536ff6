"""Engine flags, parsed the way the engine's own argparse would parse them.

specpilot reads the engine's flags as typed (`[engine] args`, or a pasted
command) instead of inventing its own vocabulary, so the planner and the rule
checker need the values those flags carry: `--mem-fraction-static 0.92` is a
float, `--disable-radix-cache` takes no value, `--speculative-config` is JSON.

A flag table says, per engine and release, which flags exist, what they are
called (aliases, renamed spellings) and what kind of value they take. Tables
are data: `flag_table()` returns the built-in table extended by any per-release
table an engine package provides (`specpilot.engines.<engine>.flags`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from specpilot.errors import UserError

FlagKind = Literal["bool", "int", "float", "str", "json", "list"]
_KINDS: dict[str, FlagKind] = {kind: kind for kind in get_args(FlagKind)}


def flag_kind(name: str) -> FlagKind:
    """A flag table's kind name as a FlagKind; a kind we do not model parses as a string."""
    return _KINDS.get(name, "str")


@dataclass(frozen=True)
class FlagDef:
    """One engine flag as the engine's argparse defines it."""

    name: str
    dest: str
    kind: FlagKind
    default: object = None
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None
    #: vLLM's BooleanOptionalAction: `--no-<name>` sets it to False
    negatable: bool = False


@dataclass
class EngineArgs:
    """A parsed flag list: typed values for the flags that were given."""

    engine: str
    version: str
    values: dict[str, object] = field(default_factory=dict)
    positional: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    #: dest -> the spelling the user typed (to quote it back in messages)
    spelled: dict[str, str] = field(default_factory=dict)

    def get(self, dest: str, default: object = None) -> object:
        return self.values.get(dest, default)

    def given(self, dest: str) -> bool:
        return dest in self.values

    def get_int(self, dest: str) -> int | None:
        value = self.values.get(dest)
        return None if value is None else int(value)  # type: ignore[call-overload]

    def get_float(self, dest: str) -> float | None:
        value = self.values.get(dest)
        return None if value is None else float(value)  # type: ignore[arg-type]

    def get_str(self, dest: str) -> str | None:
        value = self.values.get(dest)
        return None if value is None else str(value)

    def get_bool(self, dest: str) -> bool:
        return bool(self.values.get(dest, False))


def _flag(name: str, kind: FlagKind, *aliases: str, default: object = None, **kw: object) -> FlagDef:
    dest = name.removeprefix("--").replace("-", "_")
    return FlagDef(name=name, dest=dest, kind=kind, default=default, aliases=aliases, **kw)  # type: ignore[arg-type]


# The flags specpilot's planner reads. Per-release tables (every flag the
# release's argparse defines) extend these where an engine package ships them.
_SGLANG_CORE: tuple[FlagDef, ...] = (
    _flag("--model-path", "str", "--model"),
    _flag("--tokenizer-path", "str"),
    _flag("--served-model-name", "str"),
    _flag("--host", "str"),
    _flag("--port", "int"),
    _flag("--dtype", "str"),
    _flag("--kv-cache-dtype", "str"),
    _flag("--quantization", "str"),
    _flag("--trust-remote-code", "bool"),
    _flag("--context-length", "int"),
    _flag("--tp-size", "int", "--tp", "--tensor-parallel-size", default=1),
    _flag("--dp-size", "int", "--dp", "--data-parallel-size", default=1),
    _flag("--pp-size", "int", "--pipeline-parallel-size", default=1),
    _flag("--ep-size", "int", "--ep", "--expert-parallel-size", default=1),
    _flag("--mem-fraction-static", "float"),
    _flag("--max-running-requests", "int"),
    _flag("--max-total-tokens", "int"),
    _flag("--max-prefill-tokens", "int"),
    _flag("--chunked-prefill-size", "int"),
    _flag("--page-size", "int"),
    _flag("--cuda-graph-max-bs", "int"),
    _flag("--disable-cuda-graph", "bool"),
    _flag("--disable-radix-cache", "bool"),
    _flag("--disable-overlap-schedule", "bool"),
    _flag("--enable-mixed-chunk", "bool"),
    _flag("--enable-dp-attention", "bool"),
    _flag("--enable-hierarchical-cache", "bool"),
    _flag("--attention-backend", "str"),
    _flag("--speculative-algorithm", "str"),
    _flag("--speculative-draft-model-path", "str", "--speculative-draft-model"),
    _flag("--speculative-num-steps", "int"),
    _flag("--speculative-eagle-topk", "int"),
    _flag("--speculative-num-draft-tokens", "int"),
    _flag("--mamba-scheduler-strategy", "str"),
    _flag("--mamba-radix-cache-strategy", "str"),
    _flag("--max-mamba-cache-size", "int"),
    _flag("--mamba-full-memory-ratio", "float"),
    _flag("--mamba-ssm-dtype", "str"),
    _flag("--language-only", "bool"),
    _flag("--disable-piecewise-cuda-graph", "bool"),
)

_VLLM_CORE: tuple[FlagDef, ...] = (
    _flag("--model", "str"),
    _flag("--served-model-name", "list"),
    _flag("--host", "str"),
    _flag("--port", "int"),
    _flag("--dtype", "str"),
    _flag("--kv-cache-dtype", "str"),
    _flag("--quantization", "str", "-q"),
    _flag("--trust-remote-code", "bool", negatable=True),
    _flag("--max-model-len", "str"),
    _flag("--tensor-parallel-size", "int", "-tp", default=1),
    _flag("--pipeline-parallel-size", "int", "-pp", default=1),
    _flag("--data-parallel-size", "int", "-dp", default=1),
    _flag("--gpu-memory-utilization", "float", default=0.9),
    _flag("--kv-cache-memory-bytes", "str"),
    _flag("--max-num-seqs", "int"),
    _flag("--max-num-batched-tokens", "int"),
    _flag("--block-size", "int"),
    _flag("--enable-prefix-caching", "bool", negatable=True),
    _flag("--enforce-eager", "bool", negatable=True),
    _flag("--speculative-config", "json"),
    _flag("--mamba-ssm-cache-dtype", "str"),
    _flag("--mamba-cache-dtype", "str"),
    _flag("--load-format", "str"),
    _flag("--language-model-only", "bool", negatable=True),
    _flag("--skip-tokenizer-init", "bool", negatable=True),
    _flag("--reasoning-parser", "str"),
    _flag("--gdn-prefill-backend", "str"),
    _flag("--max-cudagraph-capture-size", "int"),
    _flag("--cpu-offload-gb", "float"),
)

_CORE_TABLES: dict[str, tuple[FlagDef, ...]] = {"sglang": _SGLANG_CORE, "vllm": _VLLM_CORE}


def _release_table(engine: str, version: str) -> Sequence[FlagDef]:
    """Flags of one release from the engine package's data, when it ships any."""
    import importlib

    try:
        module = importlib.import_module(f"specpilot.engines.{engine}.flags")
    except ModuleNotFoundError:
        return ()
    release_flags = getattr(module, "release_flags", None)
    return tuple(release_flags(version)) if callable(release_flags) else ()


def flag_table(engine: str, version: str) -> dict[str, FlagDef]:
    """Every spelling (name, alias, `--no-` form) -> its FlagDef, for one engine release."""
    if engine not in _CORE_TABLES:
        raise UserError(f"unknown engine {engine!r}", field="[engine] name", fix='use "sglang" or "vllm"')
    table: dict[str, FlagDef] = {}
    # A release table is the engine's whole argparse: a flag it lacks does not exist there.
    for flag in _release_table(engine, version) or _CORE_TABLES[engine]:
        for spelling in (flag.name, *flag.aliases):
            table[spelling] = flag
    return table


_KIND_WORDS: dict[str, str] = {"int": "an integer", "float": "a number", "json": "JSON"}


def _abbreviation(table: Mapping[str, FlagDef], spelling: str) -> FlagDef | None:
    """argparse's `allow_abbrev` (on in both engines): a unique prefix of a long flag is that
    flag, so `--tp 2` means `--tp-size 2` to SGLang. An ambiguous prefix matches nothing."""
    if not spelling.startswith("--"):
        return None
    matches = {flag.name: flag for name, flag in table.items() if name.startswith(spelling)}
    return next(iter(matches.values())) if len(matches) == 1 else None


def convert_value(kind: str, text: str) -> object:
    """A flag's text as its kind's Python value (int, float, JSON); ValueError if it is not one."""
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "json":
        return json.loads(text)
    return text


def _convert(flag: FlagDef, spelling: str, text: str) -> object:
    try:
        return convert_value(flag.kind, text)
    except ValueError:
        raise UserError(
            f"{spelling} takes {_KIND_WORDS[flag.kind]}, got {text!r}",
            field="[engine] args",
            fix=f"write {spelling} <{flag.kind}>",
        ) from None


def parse_engine_args(engine: str, version: str, argv: Sequence[str]) -> EngineArgs:
    """Parse flags as the engine would: `--flag value`, `--flag=value`, booleans without a value.

    Flags the table does not know are kept in `unknown` (with their value, when the
    next token is not a flag) so a rule can report them instead of failing here.
    """
    table = flag_table(engine, version)
    # Prefixes resolve only against a release's whole table: the hand table is a subset,
    # and a prefix unique within it may be ambiguous in the real parser.
    complete = bool(_release_table(engine, version))
    parsed = EngineArgs(engine=engine, version=version, raw=list(argv))
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-") or token == "-":
            parsed.positional.append(token)
            continue
        spelling, has_inline, inline = token.partition("=")
        flag = table.get(spelling) or (_abbreviation(table, spelling) if complete else None)
        negated = False
        if flag is None and spelling.startswith("--no-"):
            positive = table.get("--" + spelling.removeprefix("--no-"))
            if positive is not None and positive.negatable:
                flag, negated = positive, True
        if flag is None:
            parsed.unknown.append(token)
            if not has_inline and i < len(tokens) and not tokens[i].startswith("-"):
                parsed.unknown.append(tokens[i])
                i += 1
            continue
        parsed.spelled[flag.dest] = spelling
        if flag.kind == "bool":
            parsed.values[flag.dest] = not negated
            continue
        if flag.kind == "list":
            values: list[str] = [inline] if has_inline else []
            while not has_inline and i < len(tokens) and not tokens[i].startswith("-"):
                values.append(tokens[i])
                i += 1
            parsed.values[flag.dest] = values
            continue
        if has_inline:
            text = inline
        elif i < len(tokens):
            text = tokens[i]
            i += 1
        else:
            raise UserError(
                f"{spelling} needs a value", field="[engine] args", fix=f"write {spelling} <value>"
            )
        if flag.choices is not None and text not in flag.choices:
            raise UserError(
                f"{spelling} {text!r} is not one of {', '.join(flag.choices)}",
                field="[engine] args",
                fix=f"write {spelling} with one of those values",
            )
        parsed.values[flag.dest] = _convert(flag, spelling, text)
    return parsed
