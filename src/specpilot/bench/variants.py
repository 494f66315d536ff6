"""The configurations a bench compares, and each one's spec at the knobs its plan recommends.

A variant is "plain" (no speculation) or a speculative method at k draft tokens, optionally
with the engine's own adaptive speculation, at a running-request cap (the plan's maximum when
none is given); where the plan puts a configuration near its release's prefill-graph gate,
the same configuration on the gate's other side (`Plan.prefill_gate`) is a variant too. How
each is written is engine knowledge, carried by the engine's adapter (`draft`,
`engines/draft.py`): SGLang's in `engines/sglang/draft.py`, vLLM's in `engines/vllm/draft.py`.

Each variant goes through `up`'s own preflight: what `check` refuses stays refused, a plan
that does not fit is given the plan's own recommendation once, and the variant then runs
at the knobs `plan` recommends for it (memory fraction, running requests, state slots).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from specpilot.check.resolved import ResolvedSpec, resolve
from specpilot.check.types import CheckResult
from specpilot.engines.adapter import Engine, EngineRelease
from specpilot.engines.argv import ReadArgv, read_argv
from specpilot.engines.bounds import without_flag
from specpilot.engines.fix import Fix
from specpilot.engines.flags import ReleaseTable
from specpilot.errors import UserError
from specpilot.launch.command import api_key_of
from specpilot.launch.preflight import Preflight, run_preflight
from specpilot.models.host_files import ModelRead
from specpilot.plan.compare import without_speculation
from specpilot.plan.fraction import FRACTION_STEP, LOWEST_FRACTION
from specpilot.plan.serving import serving_args
from specpilot.plan.types import Plan
from specpilot.secrets import mask_argv, redact
from specpilot.spec import Spec

PLAIN = "plain"
#: the draft-token counts compared when --variants is not given
DEFAULT_DRAFT_TOKENS = (1, 2, 3)
VARIANTS_FIX = (
    "write it like plain,NEXTN:1,NEXTN:3,NEXTN:3:adaptive (SGLang; adaptive where the release has "
    "--speculative-adaptive) or plain,mtp:2 (vLLM)"
)


@dataclass(frozen=True)
class Variant:
    """What to measure: no speculation (`method` None) or `method` at `draft_tokens`, with
    the engine's adaptive speculation when `adaptive`, at `running_cap` requests at once
    (None: the plan's maximum)."""

    method: str | None = None
    draft_tokens: int = 0
    adaptive: bool = False
    running_cap: int | None = None
    #: the prefill graph's side of the release's gate when it is not the plan's own:
    #: "kept" (a lower fraction) or "off" (turned off, its room given to KV)
    prefill_graph: Literal["kept", "off"] | None = None
    #: the flags of that side, as the plan gives them (`PrefillGate.other_side_args`)
    side_args: tuple[str, ...] = ()
    #: whether the plan recommends again with `side_args` given (else they go over its recommendation)
    replan: bool = False

    @property
    def config(self) -> Variant:
        """The same variant at the plan's maximum running requests."""
        return replace(self, running_cap=None)

    def at(self, cap: int) -> Variant:
        return replace(self, running_cap=cap)

    @property
    def label(self) -> str:
        name = PLAIN if self.method is None else f"{self.method}-{self.draft_tokens}"
        name += "-adaptive" if self.adaptive else ""
        name += f"-graph-{self.prefill_graph}" if self.prefill_graph else ""
        return name if self.running_cap is None else f"{name}@{self.running_cap}"


def _read(spec: Spec, release: EngineRelease) -> ReadArgv:
    return read_argv(release.table, spec.engine.args)


def spec_method(spec: Spec, release: EngineRelease) -> str | None:
    """The speculative method the spec turns on, None for a plain spec."""
    return release.engine.draft.method_of(_read(spec, release))


def variant_of(spec: Spec, release: EngineRelease) -> Variant:
    """The variant the spec itself is (how its bench row is labelled)."""
    knobs, read = release.engine.draft, _read(spec, release)
    method = knobs.method_of(read)
    return Variant() if method is None else Variant(method, knobs.draft_tokens_of(read))


def adaptive_flag(release: EngineRelease) -> str | None:
    """The engine's adaptive-speculation flag where this release has one (its flag table)."""
    flag = release.engine.draft.adaptive_flag
    return flag if flag is not None and flag in release.table.by_spelling else None


def measured_label(spec: Spec, release: EngineRelease, labels: list[str]) -> str | None:
    """The bench point among `labels` that is this spec: its own cap where it sets one
    (`--max-running-requests` / `--max-num-seqs`), else its configuration at the largest cap
    measured (the plan's maximum, which the spec runs at)."""
    own = variant_of(spec, release)
    own_cap = _own_cap(spec, release)
    if own_cap is not None:
        wanted = own.at(own_cap).label
        return wanted if wanted in labels else None
    if own.label in labels:  # a bench.json of one point per configuration
        return own.label
    caps = [
        int(cap)
        for config, _, cap in (label.partition("@") for label in labels)
        if config == own.label and cap
    ]
    return own.at(max(caps)).label if caps else None


def _own_cap(spec: Spec, release: EngineRelease) -> int | None:
    """The running-request cap the spec sets itself; None where it runs at the plan's maximum."""
    flag = release.table.by_spelling.get(release.engine.draft.running_cap_flag)
    given = _read(spec, release).last(flag.dest) if flag is not None else None
    if given is None or not given.text or not given.text.isdigit():
        return None
    return int(given.text)


def default_variants(spec: Spec, release: EngineRelease) -> list[Variant]:
    """Plain, the spec's method at 1, 2, 3 draft tokens, and at the deepest with the engine's
    adaptive speculation where the release has it."""
    method = spec_method(spec, release)
    plain = [Variant()]
    if method is None:
        return plain
    found = plain + [Variant(method, k) for k in DEFAULT_DRAFT_TOKENS]
    if adaptive_flag(release) is not None:
        found.append(Variant(method, DEFAULT_DRAFT_TOKENS[-1], adaptive=True))
    return found


def parse_variants(text: str, engine: Engine) -> list[Variant]:
    """`plain,NEXTN:1,NEXTN:3` -> variants; one line naming --variants for a bad item."""
    found = [_parse_item(item, engine) for item in (part.strip() for part in text.split(",")) if item]
    if not found:
        raise UserError("names no variant", field="--variants", fix=VARIANTS_FIX)
    return list(dict.fromkeys(found))


def _parse_item(item: str, engine: Engine) -> Variant:
    """One item of --variants: plain, METHOD:K or METHOD:K:adaptive."""
    if item.lower() in (PLAIN, "none", "off"):
        return Variant()
    method, _, count = (part.strip() for part in item.partition(":"))
    count, _, mode = (part.strip() for part in count.partition(":"))
    name = _method_name(method, engine)
    # ASCII digits: "²".isdigit() is true and int() refuses it
    if not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= 16:
        raise UserError(
            f"{item!r} gives no draft-token count from 1 to 16",
            field="--variants",
            fix=VARIANTS_FIX,
        )
    if mode and mode.lower() != "adaptive":
        raise UserError(f"{item!r}: {mode!r} is not a mode", field="--variants", fix=VARIANTS_FIX)
    return Variant(name, int(count), adaptive=bool(mode))


def _method_name(method: str, engine: Engine) -> str:
    """The speculative method as the engine spells it; one line naming --variants for another."""
    knobs = engine.draft
    name = method if knobs.case_sensitive else method.upper()
    if name not in knobs.methods:
        shown = ", ".join(sorted(knobs.methods)[:12])
        raise UserError(
            f"{method!r} is not a speculative method of {engine.name}",
            field="--variants",
            fix=f"use plain or one of {shown}, ...; {VARIANTS_FIX}",
        )
    return name


def variant_spec(spec: Spec, release: EngineRelease, variant: Variant, name: str) -> Spec:
    """The spec as this variant runs it, as run `name`: plain drops the speculative flags,
    a method keeps the spec's own flags (its mamba strategy, say) and sets method and k."""
    if variant.method is None:
        base = without_speculation(spec) or spec
        args, env = list(base.engine.args), dict(base.engine.env)
    else:
        flags = release.engine.draft.args_for(_read(spec, release), variant.method, variant.draft_tokens)
        adaptive = adaptive_flag(release)
        if variant.adaptive and adaptive is not None:
            flags += (adaptive,)
        args, env = Fix(args=flags).apply(release.table, spec.engine.args, spec.engine.env)
    engine = spec.engine.model_copy(update={"args": args, "env": env})
    return spec.model_copy(update={"name": name, "engine": engine})


@dataclass(frozen=True)
class Prepared:
    """A variant ready to start (`spec`, `plan`), or refused with the reason."""

    variant: Variant
    spec: Spec
    plan: Plan | None
    refused: str | None = None
    #: the flags taken from the plan's recommendation
    recommended: tuple[str, ...] = ()
    #: values check's fixes move onto a secret flag (a mistyped `--api-ky KEY`): never shown
    secrets: tuple[str, ...] = ()
    #: the key the point's engine starts with (--api-key): its requests send it, else all are 401
    api_key: str | None = None

    def shown_argv(self) -> list[str]:
        """The point's flags to print or store: every secret value masked."""
        return [redact(arg, self.secrets) for arg in mask_argv(self.spec.engine.args)]


def prepare(
    spec: Spec, release: EngineRelease, variant: Variant, name: str, files: ModelRead | None = None
) -> Prepared:
    """Check and plan the variant; run it at the plan's recommended knobs, its running
    requests capped at the variant's cap (refused above the plan's maximum). `files`: the
    model as the bench read it (a variant changes flags, not the model)."""
    candidate = _candidate(spec, release, variant, name)
    if variant.adaptive and adaptive_flag(release) is None:
        return Prepared(
            variant, candidate, None, refused=f"{release_name(release)} has no adaptive speculation"
        )
    resolved = resolve(candidate, files)  # the model read once for every preflight below
    candidate, pre = _fitted(resolved, release.table)
    if pre.errors or pre.plan is None:
        secrets = tuple(resolved.check.fix_secrets())
        refused = redact(_reason(pre, _first_fix(pre, resolved.check)), secrets)
        return Prepared(variant, candidate, None, refused=refused, secrets=secrets)
    recommended = _over(tuple(pre.plan.recommended_args), variant.side_args)
    tuned = _fixed(candidate, Fix(args=recommended, env=dict(pre.plan.recommended_env)), release.table)
    point = resolved.respec(tuned)
    final = run_preflight(point)
    if final.errors or final.plan is None:
        return Prepared(variant, tuned, None, refused=_reason(final), recommended=recommended)
    if variant.running_cap is None:
        return _serving(variant, point, final.plan, recommended, release.table)
    most = final.plan.max_running_requests
    if variant.running_cap > most:
        refused = f"{variant.running_cap} running requests: the plan's most is {most}"
        return Prepared(variant, tuned, None, refused=refused, recommended=recommended)
    return _capped(variant, resolved, tuned, recommended, release)


def _candidate(spec: Spec, release: EngineRelease, variant: Variant, name: str) -> Spec:
    """The variant's spec, with its gate side's flags where the plan recommends again with them."""
    candidate = variant_spec(spec, release, variant, name)
    if not variant.replan:
        return candidate
    return _fixed(candidate, Fix(args=variant.side_args), release.table)


def _fitted(resolved: ResolvedSpec, table: ReleaseTable) -> tuple[Spec, Preflight]:
    """The candidate and its preflight: as given, or where it does not fit, at the plan's
    recommendation (what `plan` would have it run at)."""
    candidate, pre = resolved.spec, run_preflight(resolved)
    if not pre.errors or pre.cause != "oom" or pre.fix is None:
        return candidate, pre
    candidate = _fixed(candidate, pre.fix, table)
    return candidate, run_preflight(resolved.respec(candidate))


def _capped(
    variant: Variant,
    resolved: ResolvedSpec,
    tuned: Spec,
    recommended: tuple[str, ...],
    release: EngineRelease,
) -> Prepared:
    """The tuned point at the variant's own running-request cap, below the plan's maximum."""
    flag = release.engine.draft.running_cap_flag
    cap = (flag, str(variant.running_cap))
    point = resolved.respec(_fixed(tuned, Fix(args=cap), release.table))
    final = run_preflight(point)
    # the plan's own cap flag gives way to the point's
    recommended = (*without_flag(recommended, flag), *cap)
    if final.errors and final.cause == "oom":
        # fewer requests can change what the engine decides for itself (SGLang 0.5.16-0.5.17
        # capture the prefill graph once smaller decode graphs leave 4 GiB past the pools, and
        # the configuration's fraction then leaves too little): the point at its own cap, one
        # fraction step lower at a time until its plan fits
        point, final, recommended = _stepped_down(point, final, recommended, release)
    if final.errors or final.plan is None:
        return Prepared(variant, point.spec, None, refused=_reason(final), recommended=recommended)
    return _serving(variant, point, final.plan, recommended, release.table)


def _stepped_down(
    point: ResolvedSpec, pre: Preflight, recommended: tuple[str, ...], release: EngineRelease
) -> tuple[ResolvedSpec, Preflight, tuple[str, ...]]:
    """`point` at the highest fraction below its own whose plan fits (or as it was, with its
    refusal, when none does), down to LOWEST_FRACTION in FRACTION_STEPs."""
    spec, table = point.spec, release.table
    flag = table.by_spelling.get(release.engine.draft.memory_fraction_flag)
    use = None if flag is None else read_argv(table, spec.engine.args).last(flag.dest)
    try:
        given = float(use.text) if use is not None and use.text is not None else None
    except ValueError:
        given = None
    if flag is None or given is None:
        return point, pre, recommended
    fraction = round(given - FRACTION_STEP, 2)
    while fraction >= LOWEST_FRACTION:
        lower = (flag.name, f"{fraction:.2f}")
        trial = point.respec(_fixed(spec, Fix(args=lower), table))
        found = run_preflight(trial)
        if not found.errors and found.plan is not None:
            return trial, found, _over(recommended, lower)
        fraction = round(fraction - FRACTION_STEP, 2)
    return point, pre, recommended


def _serving(
    variant: Variant, point: ResolvedSpec, plan: Plan, recommended: tuple[str, ...], table: ReleaseTable
) -> Prepared:
    """The point with the flags its plan says it needs to serve, not only to start (SGLang's
    radix-cache copy-on-write bound, say), as `plan --write` writes them: the point measured is
    the point `--write` hands to `up`, safe to run the whole job."""
    spec = point.spec
    added = tuple(serving_args(point, plan))
    if not added:
        return Prepared(variant, spec, plan, recommended=recommended, api_key=_key(point))
    served = _fixed(spec, Fix(args=added), table)
    final = run_preflight(point.respec(served))
    recommended = _over(recommended, added)
    if final.errors or final.plan is None:
        return Prepared(variant, served, None, refused=_reason(final), recommended=recommended)
    return Prepared(variant, served, final.plan, recommended=recommended, api_key=_key(point))


def _key(point: ResolvedSpec) -> str | None:
    return api_key_of(point.spec, point.release.engine)


def _over(recommended: tuple[str, ...], side: tuple[str, ...]) -> tuple[str, ...]:
    """The recommendation with the gate side's flags given over it (a flag of both: the side's)."""
    for flag in (arg for arg in side if arg.startswith("--")):
        recommended = tuple(without_flag(recommended, flag))
    return (*recommended, *side)


def release_name(release: EngineRelease) -> str:
    """The release as a line names it ("SGLang 0.5.13")."""
    return f"{release.engine.display_name} {release.version_text}"


def _fixed(spec: Spec, fix: Fix, table: ReleaseTable) -> Spec:
    """`spec` with `fix` made to its flags and environment."""
    args, env = fix.apply(table, spec.engine.args, spec.engine.env)
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": args, "env": env})})


def _reason(pre: Preflight, fix: Fix | None = None) -> str:
    where = "check refuses it" if pre.cause == "config" else "it does not fit"
    first = pre.errors[0] if pre.errors else "no plan"
    said = fix.describe() if fix is not None else ""
    more = f" (+{len(pre.errors) - 1} more)" if len(pre.errors) > 1 else ""
    return f"{where}: {first}{f'; fix: {said}' if said else ''}{more}"


def _first_fix(pre: Preflight, result: CheckResult) -> Fix | None:
    """Check's fix for the refusal `_reason` names first, as `check` prints it."""
    if pre.cause != "config" or not pre.errors:
        return None
    return next((f.fix for f in result.findings if f"{f.rule}: {f.message}" == pre.errors[0]), None)
