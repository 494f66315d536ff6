"""Memory planning: spec -> model shape -> per-engine arithmetic -> Plan."""

from __future__ import annotations

from dataclasses import replace

from specpilot.check.effective import EffectiveArgs
from specpilot.check.resolved import ResolvedSpec, resolve
from specpilot.engines.fix import Fix
from specpilot.engines.logfacts import LogFacts
from specpilot.models.shape import PLANNED_ARCHITECTURES, ModelShape
from specpilot.plan.planners import planner_for
from specpilot.plan.provenance import provenance
from specpilot.plan.types import Plan, Problem, Term
from specpilot.spec import Spec

__all__ = ["Fix", "Plan", "Problem", "Term", "make_plan", "plan_inputs"]


def plan_inputs(spec: Spec) -> tuple[ModelShape, EffectiveArgs]:
    """The model shape (config.json read on the spec's host), and the flags as `check`'s rules
    evaluate them for that model."""
    resolved = resolve(spec)
    return resolved.shape, resolved.args


def make_plan(resolved: ResolvedSpec, facts: LogFacts | None = None) -> Plan:
    """The plan for a resolved spec, by its engine's planner; `facts`: what a start's log
    printed (`calibrate_from_log`)."""
    release = resolved.release
    planner = planner_for(release.name)
    shape = resolved.shape
    plan = planner.plan(resolved.spec, shape, resolved.args, facts)
    notes = plan.notes
    if shape.architecture not in PLANNED_ARCHITECTURES:
        notes = [
            f"warning: architecture {shape.architecture} is not one this planner was checked on; its "
            "layers are planned as plain attention + MLP, so the verdict may be wrong: calibrate with "
            "--from-log (an engine startup log) before trusting it",
            *notes,
        ]
    return replace(plan, provenance=provenance(release), notes=notes)
