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
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from specpilot.dtypes import DTYPE_BYTES
from specpilot.engines.sglang import loglines as sglang_lines
from specpilot.engines.vllm import loglines as vllm_lines
from specpilot.errors import UserError
from specpilot.models.shape import ModelShape
from specpilot.plan.effective import effective_args
from specpilot.plan.types import GIB
from specpilot.spec import Spec

FIELD = "--from-log"
#: relative KV-per-token difference above which a log is another model's (the printed sizes
#: carry two decimals and the pools round to pages: both stay far below this)
FOOTPRINT_TOLERANCE = 0.05


@dataclass(frozen=True)
class LogSignature:
    """How one engine's startup log reads (the lines are declared in its `loglines`)."""

    engine: str
    name: str
    #: lines only this engine prints
    markers: tuple[re.Pattern[str], ...]
    #: lines printed once the weights are loaded (the end-of-load line or a later stage)
    loaded: tuple[re.Pattern[str], ...]
    #: the end-of-load line as a user finds it in the log
    loaded_line: str


SIGNATURES: dict[str, LogSignature] = {
    "sglang": LogSignature(
        "sglang", "SGLang", sglang_lines.MARKERS, sglang_lines.LOADED, sglang_lines.LOADED_LINE
    ),
    "vllm": LogSignature("vllm", "vLLM", vllm_lines.MARKERS, vllm_lines.LOADED, vllm_lines.LOADED_LINE),
}


def _found(patterns: tuple[re.Pattern[str], ...], text: str) -> bool:
    return any(p.search(text) for p in patterns)


def refuse_other_engine(spec: Spec, text: str) -> None:
    """A log of the other engine (and none of this one's lines)."""
    own = SIGNATURES[spec.engine.name]
    if _found(own.markers, text):
        return
    for other in SIGNATURES.values():
        if other.engine != own.engine and _found(other.markers, text):
            raise UserError(
                f"the log is a {other.name} log; the spec's engine is {own.name}",
                field=FIELD,
                fix=f"give the log of a {own.name} {spec.engine.version} start, or plan a {other.name} spec",
            )


def refuse_unfinished_load(spec: Spec, text: str) -> None:
    """A log that stops before the weights finished loading measures nothing the plan uses."""
    signature = SIGNATURES[spec.engine.name]
    if _found(signature.markers, text) and not _found(signature.loaded, text):
        raise UserError(
            f"the log ends before weight loading finished (no '{signature.loaded_line}' line)",
            field=FIELD,
            fix=f"give the log of a {signature.name} start that got at least past '{signature.loaded_line}'",
        )


def refuse_other_release(spec: Spec, logged_version: object) -> None:
    """The log's own release line against the spec's (0.5.13 and 0.5.13.post1 are one line)."""
    if not isinstance(logged_version, str):
        return
    try:
        logged, planned = Version(logged_version), Version(spec.engine.version)
    except InvalidVersion:
        return
    if logged.release == planned.release:
        return
    name = SIGNATURES[spec.engine.name].name
    raise UserError(
        f"the log is from {name} {logged_version}; the spec plans {name} {spec.engine.version}",
        field=FIELD,
        fix=f'set [engine] version = "{logged_version}" (or --engine-version {logged_version}), '
        f"or give the log of a {spec.engine.version} start",
    )


def refuse_other_parallelism(spec: Spec, shape: ModelShape, facts: Mapping[str, object]) -> None:
    """Weights per GPU follow tensor parallelism: a log of another TP size calibrates wrongly."""
    logged = facts.get("tp_size")
    if logged is None:
        return
    args = effective_args(spec, shape)
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


def refuse_other_architecture(spec: Spec, shape: ModelShape, facts: Mapping[str, object]) -> None:
    logged = facts.get("architecture")
    if not isinstance(logged, str) or _family(logged) == _family(shape.architecture):
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


def _refuse_footprint(spec: Spec, shape: ModelShape, logged: float, planned: float, what: str) -> None:
    if planned <= 0 or abs(logged / planned - 1) <= FOOTPRINT_TOLERANCE:
        return
    raise UserError(
        f"the log's {what} is {logged:,.0f} bytes per token; the spec's model ({_model_words(shape)}) "
        f"takes {planned:,.0f}: the log is from another model",
        field=FIELD,
        fix="give the log of a start of the [model] path's model, or set [model] path to the log's model",
    )


def refuse_other_sglang_footprint(spec: Spec, shape: ModelShape, facts: Mapping[str, object]) -> None:
    """SGLang prints the target's K cache size and token count: K bytes per token per GPU."""
    from specpilot.models.layers import layer_specs
    from specpilot.plan.sglang import planner_settings

    dtype, tokens, k_gib = facts.get("kv_dtype"), facts.get("kv_tokens"), facts.get("k_cache_gib")
    # MLA caches a latent, and sliding-window layers get their own smaller pool: skipped
    if shape.kv_lora_rank or shape.sliding_attention_layers:
        return
    if not isinstance(dtype, str) or not isinstance(tokens, int) or not isinstance(k_gib, float):
        return
    if dtype not in DTYPE_BYTES or not tokens or not k_gib:
        return
    s = planner_settings(spec, shape, effective_args(spec, shape))
    heads = layer_specs(shape).full_attention.kv_heads_per_gpu(s.tp_size)
    planned = shape.full_attention_layers * heads * shape.head_dim * DTYPE_BYTES[dtype]
    _refuse_footprint(spec, shape, k_gib * GIB / tokens, planned, "K cache")


def refuse_other_vllm_footprint(spec: Spec, shape: ModelShape, facts: Mapping[str, object]) -> None:
    """vLLM prints its KV memory and token count; for attention-only models their ratio is
    the KV bytes per token (mamba groups and sliding windows change the ratio: skipped)."""
    from specpilot.plan.vllm import resolve_inputs

    available, tokens = facts.get("available_kv_gib"), facts.get("kv_tokens")
    if not isinstance(available, float | int) or not isinstance(tokens, float | int):
        return
    if available <= 0 or tokens <= 0 or shape.is_hybrid or shape.sliding_attention_layers:
        return
    inputs = resolve_inputs(spec, shape, effective_args(spec, shape))
    planned = inputs.attention_bytes_per_token_per_layer * inputs.attention_layers
    _refuse_footprint(spec, shape, available * GIB / tokens, planned, "KV cache")


def refuse_foreign_log(spec: Spec, facts: Mapping[str, object]) -> None:
    """The checks of a parsed log of this engine, past weight loading, against the spec."""
    from specpilot.models.shape import load_model_shape

    refuse_other_release(spec, facts.get("version"))
    shape = load_model_shape(spec.model_dir())
    refuse_other_architecture(spec, shape, facts)
    refuse_other_parallelism(spec, shape, facts)
    if spec.engine.name == "sglang":
        refuse_other_sglang_footprint(spec, shape, facts)
    else:
        refuse_other_vllm_footprint(spec, shape, facts)
