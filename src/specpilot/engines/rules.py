"""A rule is one small declarative object: where it applies, when it fires, what it says and fixes.

Conditions are predicates over a `Context`; the small combinators below keep each rule a
single readable expression (`all_of(hybrid, eq("mamba_scheduler_strategy", "no_buffer"))`).
Messages are `str.format` templates over the effective values plus `arch`; for errors they
carry the engine's own text where the engine raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from specpilot.engines.context_len import requested_tokens
from specpilot.engines.fix import Fix

Severity = Literal["error", "warning", "adjusts"]


@dataclass(frozen=True)
class GpuFacts:
    """What the engine's validation asks the GPU; defaults describe the incident's 96 GB SM 12.0 card."""

    memory_gib: float = 96.0
    compute_capability: tuple[int, int] = (12, 0)
    is_cuda: bool = True
    #: the GPU's model name as the spec gives it (vLLM's batch defaults except A100s)
    name: str | None = None


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str
    fix: Fix | None = None
    #: `up` applies the fix to the launch itself (a flag the user left out, never one given)
    up_applies: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix.to_json() if self.fix else None,
        }


@dataclass
class Context:
    """One launch as the engine's validation sees it, updated as `adjusts` rules fire.

    `values` holds every flag's effective value (release default, then what was given,
    then the engine's own adjustments so far); `given` the dests the user set.
    """

    engine: str
    version: Version
    values: dict[str, object]
    given: frozenset[str]
    env: Mapping[str, str]
    architecture: str | None
    gpu: GpuFacts
    spelled: Mapping[str, str] = field(default_factory=dict)
    #: MTP layers the target model ships (None when unknown: no config was read)
    mtp_layers: int | None = None
    #: whether the model has linear-attention (mamba/GDN) layers (None when unknown)
    hybrid: bool | None = None
    #: the longest context this engine derives from the model's config (None: unknown)
    model_context_len: int | None = None

    def get(self, dest: str) -> object:
        return self.values.get(dest)

    def flag(self, dest: str, default: str | None = None) -> str:
        """The spelling to quote back to the user for a dest."""
        return self.spelled.get(dest, default or "--" + dest.replace("_", "-"))


Predicate = Callable[[Context], bool]
Adjustment = Callable[[Context], Mapping[str, object]]
FixMaker = Callable[[Context], Fix]


@dataclass(frozen=True)
class Rule:
    """One engine behaviour: raises (error), warns (warning) or changes args on its own (adjusts)."""

    id: str
    engine: str
    versions: SpecifierSet
    severity: Severity
    when: Predicate
    message: str
    fix: Fix | FixMaker | None = None
    #: for `adjusts`: the values the engine sets (dest -> value), computed from the context
    sets: Adjustment | None = None
    why: str = ""
    #: a warning whose fix `up` adds to the argv it starts (see Finding.up_applies)
    up_applies: bool = False
    #: values the message names beyond the flags' own (a part of a JSON flag, say), taken
    #: before the rule's own adjustment (what was given, not what the engine made of it)
    names: Callable[[Context], Mapping[str, object]] | None = None

    def applies_to(self, engine: str, version: Version) -> bool:
        return engine == self.engine and self.versions.contains(version, prereleases=True)

    def render(self, ctx: Context, named: Mapping[str, object] | None = None) -> str:
        """The message; `named`: what `names` gave before the adjustment."""
        fields = {k: v for k, v in ctx.values.items()}
        fields["arch"] = ctx.architecture or "this model"
        fields["model_context_len"] = ctx.model_context_len
        fields.update(named or {})
        return self.message.format(**fields)

    def make_fix(self, ctx: Context) -> Fix | None:
        if self.fix is None or isinstance(self.fix, Fix):
            return self.fix
        return self.fix(ctx)


@dataclass(frozen=True)
class Unsupported:
    """One row of an engine's table of why it turns a feature off or refuses it: where
    `applies`, `why` (a `str.format` template over the effective values) is the reason it gives."""

    applies: Predicate
    why: str


def first_unsupported(rows: Sequence[Unsupported], ctx: Context) -> str | None:
    """The reason of the first row that applies (rows in the engine's own order); None: supported."""
    return next((row.why.format_map(ctx.values) for row in rows if row.applies(ctx)), None)


def versions(spec: str) -> SpecifierSet:
    return SpecifierSet(spec)


# --- predicate combinators -------------------------------------------------------------


def eq(dest: str, value: object) -> Predicate:
    return lambda ctx: ctx.get(dest) == value


def one_of(dest: str, values: tuple[object, ...]) -> Predicate:
    return lambda ctx: ctx.get(dest) in values


def truthy(dest: str) -> Predicate:
    return lambda ctx: bool(ctx.get(dest))


def unset(dest: str) -> Predicate:
    return lambda ctx: ctx.get(dest) is None


def given(dest: str) -> Predicate:
    return lambda ctx: dest in ctx.given


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    """SGLang's EnvBool reading: 1/true/yes/on are true, anything else given is false."""
    raw = env.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "y", "on")


def env_true(name: str, default: bool) -> Predicate:
    return lambda ctx: env_bool(ctx.env, name, default)


def arch_in(archs: frozenset[str]) -> Predicate:
    return lambda ctx: ctx.architecture in archs


def all_of(*preds: Predicate) -> Predicate:
    return lambda ctx: all(p(ctx) for p in preds)


def any_of(*preds: Predicate) -> Predicate:
    return lambda ctx: any(p(ctx) for p in preds)


def not_(pred: Predicate) -> Predicate:
    return lambda ctx: not pred(ctx)


def int_gt(dest: str, bound: int) -> Predicate:
    def check(ctx: Context) -> bool:
        value = ctx.get(dest)
        return isinstance(value, int) and value > bound

    return check


def longer_than_model(dest: str) -> Predicate:
    """The flag asks for more tokens than the engine derives from the model's config."""

    def check(ctx: Context) -> bool:
        asked = requested_tokens(ctx.get(dest))
        return asked is not None and ctx.model_context_len is not None and asked > ctx.model_context_len

    return check


def env_in(name: str, values: tuple[str, ...]) -> Predicate:
    """An env var read as the engine reads it: stripped, lower-cased, one of `values`."""
    return lambda ctx: ctx.env.get(name, "").strip().lower() in values


def set_to(**values: object) -> Adjustment:
    return lambda ctx: values
