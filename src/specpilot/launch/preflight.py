"""The one place `up` calls into other concerns: spec loading, check, plan, host opening.

These land from other branches; each call site is here so the lead wires them in
one file. Until a concern exists its step is skipped and reported as skipped
(never silently treated as passed).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specpilot.hosts.base import Host
from specpilot.launch.classify import Fix


@dataclass
class Preflight:
    """What check and plan said before anything started."""

    plan_json: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)  # refuse unless --force
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    cause: str | None = None  # "config" (check) or "oom" (plan does not fit)
    fix: Fix | None = None


def _optional(module: str) -> Any | None:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is not None and module.startswith(err.name):
            return None
        raise


def run_preflight(spec: Any) -> Preflight:
    """`specpilot.check.check_spec(spec)` then `specpilot.plan.make_plan(spec)`."""
    result = Preflight()
    check_module = _optional("specpilot.check")
    if check_module is None or not hasattr(check_module, "check_spec"):
        result.skipped.append("check (specpilot.check.check_spec not available)")
    else:
        report = check_module.check_spec(spec)
        for finding in getattr(report, "findings", []):
            line = f"{getattr(finding, 'rule', '?')}: {getattr(finding, 'message', finding)}"
            if getattr(finding, "severity", "") == "error":
                result.errors.append(line)
                result.cause = result.cause or "config"
                fix = getattr(finding, "fix", None)
                if fix is not None and result.fix is None:
                    result.fix = Fix(line, tuple(getattr(fix, "args", ())), dict(getattr(fix, "env", {})))
            else:
                result.warnings.append(line)
    plan_module = _optional("specpilot.plan")
    if plan_module is None or not hasattr(plan_module, "make_plan"):
        result.skipped.append("plan (specpilot.plan.make_plan not available)")
    elif not result.errors:
        try:
            plan = plan_module.make_plan(spec)
        except ModuleNotFoundError as err:  # this engine's planner has not landed
            if not (err.name or "").startswith("specpilot."):
                raise
            result.skipped.append(f"plan ({err.name} not available)")
            return result
        result.plan_json = plan.to_json()
        if not plan.fits:
            result.cause = "oom"
            result.errors.append("the plan does not fit: " + "; ".join(p.message for p in plan.problems))
            if plan.recommended_args or plan.recommended_env:
                result.fix = Fix(
                    "the plan's recommended settings",
                    tuple(plan.recommended_args),
                    dict(plan.recommended_env),
                )
    return result


def open_host(target: str, options: Mapping[str, Any]) -> Host:
    """The Host for `target`: `specpilot.hosts.open_host(target, **options)`."""
    hosts = importlib.import_module("specpilot.hosts")
    host: Host = hosts.open_host(target, **options)
    return host
