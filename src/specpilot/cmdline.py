"""Pasted launch commands -> engine, flags, environment and model path.

Users paste what they ran: `python -m sglang.launch_server ...`,
`sglang serve ...`, `vllm serve MODEL ...`,
`python -m vllm.entrypoints.openai.api_server ...`, possibly behind `VAR=value`
assignments or `env VAR=value`, possibly as one quoted string with
backslash-newline continuations. All of them mean the same spec.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from specpilot.engines import registry
from specpilot.engines.adapter import Engine, EngineRelease
from specpilot.engines.argv import ReadArgv, read_argv, resolve
from specpilot.engines.registry import engine_release, spoken_names
from specpilot.errors import UserError

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")


@dataclass
class PastedCommand:
    engine: str
    #: the release a spec of the command plans without --engine-version: the engine's newest
    default_version: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    model_path: str = ""
    gpu_count: int = 1


def _tokens(tokens: list[str]) -> list[str]:
    """One pasted string (quoted whole, with continuations) or argv tokens."""
    if len(tokens) == 1 and (" " in tokens[0] or "\n" in tokens[0]):
        try:
            return shlex.split(tokens[0].replace("\\\n", " "))
        except ValueError as err:  # an unbalanced quote: the text itself is not shown (secrets)
            raise UserError(
                f"the pasted command cannot be split into words: {err}",
                field="command",
                fix="close the quote that is left open, or paste the command without outer quotes",
            ) from None
    return [t for t in tokens if t != "\\\n"]


def _split_env(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    rest = list(tokens)
    while rest:
        if rest[0] == "env":
            rest.pop(0)
            continue
        if _ASSIGNMENT.match(rest[0]):
            name, _, value = rest.pop(0).partition("=")
            env[name] = value
            continue
        break
    return env, rest


def _split_program(rest: list[str]) -> tuple[Engine, list[str]]:
    """Strip the program (`python -m X`, `sglang serve`, `vllm serve`) and return the engine."""
    if not rest:
        raise UserError(
            "the pasted command is empty",
            field="command",
            fix="paste the engine's launch command after --",
        )
    program = os.path.basename(rest[0])
    for engine in registry.ENGINES:
        launch = engine.launch
        if _PYTHON.match(rest[0]) and len(rest) >= 3 and rest[1] == "-m" and rest[2] in launch.modules:
            after = rest[3:]
            subcommand = launch.modules[rest[2]]
            if subcommand and after[:1] == [subcommand]:
                after = after[1:]
            return engine, after
        if program == launch.serve_program and rest[1:2] == ["serve"]:
            return engine, rest[2:]
    examples = tuple(example for engine in registry.ENGINES for example in engine.launch.examples)
    raise UserError(
        f"cannot tell the engine from {shlex.join(rest[:3])!r}",
        field="command",
        fix=f"paste {spoken_names(examples, '`')}",
    )


def split_model(release: EngineRelease, args: list[str]) -> tuple[str | None, list[str]]:
    """Remove the model from engine flags: spec keeps it in `[model] path`. vLLM also takes
    it as the first positional argument (`vllm serve MODEL`)."""
    table = release.table
    read = read_argv(table, args)
    model_flag = resolve(table, release.engine.model_flag)[1]
    dest = model_flag.dest if model_flag is not None else None
    given = read.last(dest) if dest is not None else None
    rest = read.without(lambda use: use.flag is not None and use.flag.dest == dest)
    if given is not None:
        return given.text, rest
    if release.engine.launch.model_positional and read.positional:
        model = read.positional[0]
        rest.remove(model)
        return model, rest
    return None, rest


def parse_launch_command(tokens: list[str]) -> PastedCommand:
    env, rest = _split_env(_tokens(tokens))
    engine, args = _split_program(rest)
    # the command's engine looked up once: its newest release reads the pasted flags
    release = engine_release(engine.name, engine.newest_version)
    model, args = split_model(release, args)
    if not model:
        fix = release.engine.launch.missing_model_fix
        raise UserError("the pasted command names no model", field="command", fix=fix)
    read = read_argv(release.table, args)
    tp = _count(read, "tp_size", "tensor_parallel_size")
    pp = _count(read, "pp_size", "pipeline_parallel_size")
    gpu_count = tp * pp
    return PastedCommand(engine.name, engine.newest_version, args, env, model, gpu_count)


def _count(read: ReadArgv, *dests: str) -> int:
    """A parallel size as given (SGLang's dest changed name across releases); 1 when not
    given or not a count: a bad size is the flag's error (check names it), not a GPU count."""
    uses = [use for dest in dests if (use := read.last(dest)) is not None]
    text = max(uses, key=lambda use: use.start).text if uses else None
    return int(text) if text is not None and text.isascii() and text.isdigit() and int(text) >= 1 else 1
