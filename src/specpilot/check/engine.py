"""Evaluate every rule of an engine release over one launch; report all findings.

The engine stops at its first error; `check` keeps going so the user sees every problem at
once. `adjusts` rules update the context in the engine's own order, so later rules see the
values the engine would see, and the final values become `effective_args`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from specpilot.check.parse import env_findings, parse_argv
from specpilot.check.types import CheckResult
from specpilot.engines.adapter import EngineRelease
from specpilot.engines.argv import read_argv
from specpilot.engines.fix import Fix
from specpilot.engines.registry import engine_release
from specpilot.engines.rules import Context, Finding, GpuFacts, Rule
from specpilot.errors import UserError


def engine_rules(release: EngineRelease) -> list[Rule]:
    return [r for r in release.engine.rules if r.applies_to(release.name, release.version)]


def refuse_unsupported(release: EngineRelease) -> None:
    """A release outside the engine's supported range is bad input, not a guess."""
    engine, version = release.name, release.version
    releases: SpecifierSet = release.engine.supported_releases
    if releases.contains(Version(version.base_version), prereleases=True):
        return
    newest = release.tables[-1].version
    bounds = " ".join(sorted((str(s) for s in releases), key=lambda s: not s.startswith(">")))
    raise UserError(
        f"{engine} {version} is outside the releases specpilot models ({bounds})",
        field="[engine] version",
        fix=f"use a release in that range, e.g. {newest} (the newest verified)",
    )


def unverified_release(release: EngineRelease) -> Finding | None:
    """A warning when no flag table of this release or a newer one was verified."""
    engine, version = release.name, release.version
    newest = release.tables[-1].version
    if version.release <= newest.release:
        return None
    return Finding(
        "release-unverified",
        "warning",
        f"{engine} {version} is newer than the newest verified flag table ({newest}): its flags, "
        f"defaults and rules are assumed unchanged since {newest}",
        Fix(text=f'pin a verified release: [engine] version = "{newest}"'),
    )


def between_tables(release: EngineRelease) -> Finding | None:
    """A warning when the release falls between two shipped tables and is read with the older
    one (below the oldest table the README's coverage table says which table stands in)."""
    engine, version, tables = release.name, release.version, release.tables
    if any(t.version.release == version.release for t in tables):
        return None
    older = [t.version for t in tables if t.version.release < version.release]
    newer = [t.version for t in tables if t.version.release > version.release]
    if not older or not newer:
        return None
    return Finding(
        "release-between-tables",
        "warning",
        f"{engine} {version} has no flag table: it is checked with {older[-1]}'s, the nearest older "
        f"one, so a flag added after {older[-1]} reads as unknown",
        Fix(text=f'pin a release with a table: [engine] version = "{older[-1]}" or "{newer[0]}"'),
    )


def _render_value(kind: str, value: object) -> list[str]:
    if kind == "bool":
        return []
    if kind == "json":
        return [json.dumps(value, separators=(",", ":"))]
    if kind == "list" and isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def _effective_args(
    release: EngineRelease, argv: Sequence[str], values: Mapping[str, object], changed: Sequence[str]
) -> list[str]:
    """The argv as given, with adjusted values replaced in place and new ones appended;
    flags the release does not define are left out (the engine would refuse them)."""
    table = release.table
    read = read_argv(table, list(argv))
    out: list[str] = []
    written: set[str] = set()
    for use_or_token in read.in_order():
        if isinstance(use_or_token, str):
            out.append(use_or_token)
            continue
        use = use_or_token
        if use.flag is None:
            continue
        if use.flag.dest not in changed:
            out += read.tokens_of(use)
            continue
        if use.flag.dest in written:  # the adjusted value is written once, where first given
            continue
        written.add(use.flag.dest)
        value = values.get(use.flag.dest)
        spelling = use.spelling if use.key_path else use.typed  # one key: the whole flag now
        if use.flag.kind == "bool":
            out += [spelling] if value else []
        else:
            out += [spelling, *_render_value(use.flag.kind, value)]
    for dest in changed:
        if dest in written:
            continue
        flag = table.by_dest.get(dest)
        value = values.get(dest)
        if flag is None or value is None or (flag.kind == "bool" and not value):
            continue
        out += [flag.name, *_render_value(flag.kind, value)]
    return out


RULE_ERROR = "rule-error"

#: the Context fields read from the model's config.json
MODEL_FACTS = frozenset({"architecture", "mtp_layers", "hybrid", "model_context_len"})


class _ModelReads(Context):
    """A Context that notes when a rule's condition reads a model fact: those are the rules a
    check without the model cannot run, which its verdict must count."""

    read_model = False

    def __getattribute__(self, name: str) -> Any:
        if name in MODEL_FACTS:
            object.__setattr__(self, "read_model", True)
        return super().__getattribute__(name)


def rule_error(rule: Rule, exc: Exception) -> Finding:
    """A rule that raised: an error finding naming the rule and the exception, so the
    launch is never accepted on a rule that was not evaluated."""
    return Finding(
        RULE_ERROR,
        "error",
        f"rule {rule.id} could not be evaluated ({type(exc).__name__}: {exc}); "
        "this is a specpilot bug: please report it with the spec",
    )


def _apply(rule: Rule, ctx: _ModelReads, changed: list[str], model_rules: list[str]) -> Finding | None:
    """Evaluate one rule; apply its adjustment to `ctx`; its finding, or None. A rule whose
    condition or adjustment read a model fact is added to `model_rules`."""
    ctx.read_model = False
    fires = rule.when(ctx)
    updates = dict(rule.sets(ctx)) if fires and rule.severity == "adjusts" and rule.sets is not None else None
    if ctx.read_model:
        model_rules.append(rule.id)
    if not fires:
        return None
    named = dict(rule.names(ctx)) if rule.names is not None else {}
    if updates is not None:
        really = {k: v for k, v in updates.items() if ctx.values.get(k) != v}
        ctx.values.update(updates)
        changed += [k for k in really if k not in changed]
        if not really:
            return None
    return Finding(rule.id, rule.severity, rule.render(ctx, named), rule.make_fix(ctx), rule.up_applies)


def check_args(
    engine: str,
    version: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    architecture: str | None = None,
    gpu: GpuFacts | None = None,
    mtp_layers: int | None = None,
    hybrid: bool | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> CheckResult:
    """Check one launch: the engine's flags, its env, the model class, the GPU facts,
    and (given the model's config.json) the context length the engine derives."""
    return check_release(
        engine_release(engine, version), argv, env, architecture, gpu, mtp_layers, hybrid, model_config
    )


def check_release(
    release: EngineRelease,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    architecture: str | None = None,
    gpu: GpuFacts | None = None,
    mtp_layers: int | None = None,
    hybrid: bool | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> CheckResult:
    """`check_args` of a release already resolved."""
    refuse_unsupported(release)
    env = dict(env or {})
    parsed = parse_argv(release, list(argv))
    release_notes = (unverified_release(release), between_tables(release))
    findings: list[Finding] = [f for f in release_notes if f is not None]
    findings += parsed.findings
    findings += env_findings(release, env)
    values = release.table.defaults()
    values.update(parsed.values)
    ctx = _ModelReads(
        engine=release.name,
        version=release.version,
        values=values,
        given=frozenset(parsed.given),
        env=env,
        architecture=architecture,
        gpu=gpu or GpuFacts(),
        spelled=parsed.spelled,
        mtp_layers=mtp_layers,
        hybrid=hybrid,
        model_context_len=release.engine.context_len(model_config) if model_config is not None else None,
    )
    changed: list[str] = []
    model_rules: list[str] = []
    for rule in engine_rules(release):
        try:
            finding = _apply(rule, ctx, changed, model_rules)
        except Exception as exc:  # a broken rule must not read as "accepted"
            finding = rule_error(rule, exc)
        if finding is not None:
            findings.append(finding)
    ok = not any(f.severity == "error" for f in findings)
    return CheckResult(
        ok=ok,
        findings=findings,
        effective_args=_effective_args(release, argv, ctx.values, changed),
        effective_env=env,
        engine=release.name,
        version=release.version_text,
        effective_values=dict(ctx.values),
        given=ctx.given,
        model_rules=tuple(model_rules),
    )
