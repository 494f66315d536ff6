"""Refuse a `--from-log` log that cannot calibrate this spec, naming what differs.

A log calibrates a plan only when it is a start of the same engine, release, model and
parallelism that got past weight loading; otherwise its numbers would silently plan
another server. Each engine's log is described as data in `engines/<engine>/loglines.py`:
the lines only that engine prints, the lines that show weight loading finished, and
the quantities the parsed log carries (release, architecture, tensor parallelism). The
model is also compared by its KV footprint per token, which fixes attention layers x KV
heads x head size.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from packaging.version import InvalidVersion, Version

from specpilot.check.effective import EffectiveArgs
from specpilot.check.resolved import ResolvedSpec
from specpilot.engines import registry
from specpilot.engines.adapter import Engine
from specpilot.engines.logfacts import LogFacts
from specpilot.errors import UserError
from specpilot.models.shape import ModelShape
from specpilot.spec import Spec

FIELD = "--from-log"
#: relative KV-per-token difference above which a log is another model's (the printed sizes
#: carry two decimals and the pools round to pages: both stay far below this)
FOOTPRINT_TOLERANCE = 0.05
#: refuses a parsed log whose KV footprint per token is another model's (an engine planner's)
FootprintCheck = Callable[[Spec, ModelShape, EffectiveArgs, LogFacts], None]


def _found(patterns: tuple[re.Pattern[str], ...], text: str) -> bool:
    return any(p.search(text) for p in patterns)


def refuse_other_engine(spec: Spec, own: Engine, text: str) -> None:
    """A log of the other engine (and none of this one's lines); `own`: the spec's engine."""
    if _found(own.log.markers, text):
        return
    for other in registry.ENGINES:
        if other is not own and _found(other.log.markers, text):
            name, other_name = own.display_name, other.display_name
            raise UserError(
                f"the log is a {other_name} log; the spec's engine is {name}",
                field=FIELD,
                fix=f"give the log of a {name} {spec.engine.version} start, or plan a {other_name} spec",
            )


def refuse_unfinished_load(engine: Engine, text: str) -> None:
    """A log that stops before the weights finished loading measures nothing the plan uses."""
    log = engine.log
    if _found(log.markers, text) and not _found(log.loaded, text):
        raise UserError(
            f"the log ends before weight loading finished (no '{log.loaded_line}' line)",
            field=FIELD,
            fix=f"give the log of a {engine.display_name} start that got at least past '{log.loaded_line}'",
        )


def refuse_other_release(spec: Spec, engine: Engine, logged_version: str | None) -> None:
    """The log's own release line against the spec's (0.5.13 and 0.5.13.post1 are one line)."""
    if logged_version is None:
        return
    try:
        logged, planned = Version(logged_version), Version(spec.engine.version)
    except InvalidVersion:
        return
    if logged.release == planned.release:
        return
    name = engine.display_name
    raise UserError(
        f"the log is from {name} {logged_version}; the spec plans {name} {spec.engine.version}",
        field=FIELD,
        fix=f'set [engine] version = "{logged_version}" (or --engine-version {logged_version}), '
        f"or give the log of a {spec.engine.version} start",
    )


def refuse_other_parallelism(args: EffectiveArgs, facts: LogFacts) -> None:
    """Weights per GPU follow tensor parallelism: a log of another TP size calibrates wrongly."""
    logged = facts.tp_size
    if logged is None:
        return
    planned = args.get_int("tp_size") or args.get_int("tensor_parallel_size")
    if planned is None or logged == planned:
        return
    raise UserError(
        f"the log's server ran with tensor parallel size {logged}; the spec's runs with {planned}",
        field=FIELD,
        fix=f"give the log of a start with tensor parallel size {planned}, or set it in [engine] args",
    )


_HEAD_SUFFIX = re.compile(r"For(?:CausalLM|ConditionalGeneration)\w*$")


def _family(architecture: str) -> str:
    """The model class without its head: an engine may load a wrapper's text-only class."""
    return _HEAD_SUFFIX.sub("", architecture)


def refuse_other_architecture(spec: Spec, shape: ModelShape, facts: LogFacts) -> None:
    logged = facts.architecture
    if logged is None or _family(logged) == _family(shape.architecture):
        return
    raise UserError(
        f"the log's model is a {logged}; the spec's model ({spec.model.path}) is a {shape.architecture}",
        field=FIELD,
        fix="give the log of a start of the [model] path's model, or set [model] path to the log's model",
    )


def _model_words(shape: ModelShape) -> str:
    layers = shape.full_attention_layers
    return (
        f"{shape.architecture}: {layers} attention layers x {shape.num_key_value_heads} KV heads "
        f"x {shape.head_dim}, hidden size {shape.hidden_size}"
    )


def refuse_footprint(spec: Spec, shape: ModelShape, logged: float, planned: float, what: str) -> None:
    """A log whose `what` bytes per token differ from the plan's by more than the tolerance is
    another model's."""
    if planned <= 0 or abs(logged / planned - 1) <= FOOTPRINT_TOLERANCE:
        return
    raise UserError(
        f"the log's {what} is {logged:,.0f} bytes per token; the spec's model ({_model_words(shape)}) "
        f"takes {planned:,.0f}: the log is from another model",
        field=FIELD,
        fix="give the log of a start of the [model] path's model, or set [model] path to the log's model",
    )


def refuse_foreign_log(
    resolved: ResolvedSpec, facts: LogFacts, refuse_other_footprint: FootprintCheck
) -> None:
    """The checks of a parsed log of this engine, past weight loading, against the spec;
    `refuse_other_footprint` is the engine planner's check of the KV bytes per token."""
    spec = resolved.spec
    refuse_other_release(spec, resolved.release.engine, facts.version)
    shape = resolved.shape
    refuse_other_architecture(spec, shape, facts)
    refuse_other_parallelism(resolved.args, facts)
    refuse_other_footprint(spec, shape, resolved.args, facts)
