"""Evaluate every rule of an engine release over one launch; report all findings.

The engine stops at its first error; `check` keeps going so the user sees every problem at
once. `adjusts` rules update the context in the engine's own order, so later rules see the
values the engine would see, and the final values become `effective_args`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from specpilot.check.flagtable import env_findings, parse_argv, release_tables, table_for
from specpilot.check.rules import Rule
from specpilot.check.types import CheckResult, Context, Finding, GpuFacts
from specpilot.errors import UserError
from specpilot.fixes import Fix

ENGINES = ("sglang", "vllm")
ENV_PREFIXES = {"sglang": ("SGLANG_", "SGL_"), "vllm": ("VLLM_",)}


def _rules_module(engine: str) -> ModuleType:
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}", field="[engine] name", fix='use "sglang" or "vllm"')
    return importlib.import_module(f"specpilot.engines.{engine}.rules")


def engine_rules(engine: str, version: Version) -> list[Rule]:
    return [r for r in _rules_module(engine).RULES if r.applies_to(engine, version)]


def parse_version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise UserError(
            f"not a release version: {text!r}", field="[engine] version", fix="e.g. 0.5.13.post1"
        ) from None


def supported_releases(engine: str) -> SpecifierSet:
    """The releases an engine's rules module covers (`SUPPORTED_RELEASES`)."""
    releases: SpecifierSet = _rules_module(engine).SUPPORTED_RELEASES
    return releases


def refuse_unsupported(engine: str, version: Version) -> None:
    """A release outside the engine's supported range is bad input, not a guess."""
    releases = supported_releases(engine)
    if releases.contains(Version(version.base_version), prereleases=True):
        return
    newest = release_tables(engine)[-1].version
    bounds = " ".join(sorted((str(s) for s in releases), key=lambda s: not s.startswith(">")))
    raise UserError(
        f"{engine} {version} is outside the releases specpilot models ({bounds})",
        field="[engine] version",
        fix=f"use a release in that range, e.g. {newest} (the newest verified)",
    )


def unverified_release(engine: str, version: Version) -> Finding | None:
    """A warning when no flag table of this release or a newer one was verified."""
    newest = release_tables(engine)[-1].version
    if version.release <= newest.release:
        return None
    return Finding(
        "release-unverified",
        "warning",
        f"{engine} {version} is newer than the newest verified flag table ({newest}): its flags, "
        f"defaults and rules are assumed unchanged since {newest}",
        Fix(text=f'pin a verified release: [engine] version = "{newest}"'),
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
    engine: str, version: Version, argv: Sequence[str], values: Mapping[str, object], changed: Sequence[str]
) -> list[str]:
    """The argv as given, with adjusted values replaced in place and new ones appended."""
    table = table_for(engine, version)
    out: list[str] = []
    written: set[str] = set()
    i = 0
    tokens = list(argv)
    while i < len(tokens):
        token = tokens[i]
        i += 1
        spelling, has_inline, _ = token.partition("=")
        flag = table.by_spelling.get(spelling)
        if flag is None and spelling.startswith("--"):
            # the engine would refuse it: it is not part of what runs
            if not has_inline and i < len(tokens) and not tokens[i].startswith("--"):
                i += 1
            continue
        if flag is None or flag.dest not in changed:
            out.append(token)
            continue
        if flag.kind != "bool" and not has_inline:
            i += 1  # skip its old value
        written.add(flag.dest)
        value = values.get(flag.dest)
        if flag.kind == "bool":
            if value:
                out.append(spelling)
        else:
            out += [spelling, *_render_value(flag.kind, value)]
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


def rule_error(rule: Rule, exc: Exception) -> Finding:
    """A rule that raised: an error finding naming the rule and the exception, so the
    launch is never accepted on a rule that was not evaluated."""
    return Finding(
        RULE_ERROR,
        "error",
        f"rule {rule.id} could not be evaluated ({type(exc).__name__}: {exc}); "
        "this is a specpilot bug: please report it with the spec",
    )


def _apply(rule: Rule, ctx: Context, changed: list[str]) -> Finding | None:
    """Evaluate one rule; apply its adjustment to `ctx`; its finding, or None."""
    if not rule.when(ctx):
        return None
    if rule.severity == "adjusts" and rule.sets is not None:
        updates = dict(rule.sets(ctx))
        really = {k: v for k, v in updates.items() if ctx.values.get(k) != v}
        ctx.values.update(updates)
        changed += [k for k in really if k not in changed]
        if not really:
            return None
    return Finding(rule.id, rule.severity, rule.render(ctx), rule.make_fix(ctx))


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
    rules = _rules_module(engine)
    parsed_version = parse_version(version)
    refuse_unsupported(engine, parsed_version)
    env = dict(env or {})
    parsed = parse_argv(engine, parsed_version, list(argv))
    unverified = unverified_release(engine, parsed_version)
    findings: list[Finding] = [unverified] if unverified else []
    findings += parsed.findings
    findings += env_findings(
        engine, parsed_version, env, ENV_PREFIXES[engine], getattr(rules, "ENV_REPLACEMENTS", {})
    )
    values = table_for(engine, parsed_version).defaults()
    values.update(parsed.values)
    ctx = Context(
        engine=engine,
        version=parsed_version,
        values=values,
        given=frozenset(parsed.given),
        env=env,
        architecture=architecture,
        gpu=gpu or GpuFacts(),
        spelled=parsed.spelled,
        mtp_layers=mtp_layers,
        hybrid=hybrid,
        model_context_len=rules.context_len(model_config) if model_config is not None else None,
    )
    changed: list[str] = []
    for rule in engine_rules(engine, parsed_version):
        try:
            finding = _apply(rule, ctx, changed)
        except Exception as exc:  # a broken rule must not read as "accepted"
            finding = rule_error(rule, exc)
        if finding is not None:
            findings.append(finding)
    ok = not any(f.severity == "error" for f in findings)
    return CheckResult(
        ok=ok,
        findings=findings,
        effective_args=_effective_args(engine, parsed_version, argv, ctx.values, changed),
        effective_env=env,
        engine=engine,
        version=version,
        effective_values=dict(ctx.values),
        given=ctx.given,
    )
