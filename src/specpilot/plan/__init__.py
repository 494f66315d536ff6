"""Memory planning: spec -> model shape -> per-engine arithmetic -> Plan."""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.check.effective import EffectiveArgs
from specpilot.engines.fix import Fix
from specpilot.engines.registry import engine_release
from specpilot.models.host_files import ModelRead
from specpilot.models.shape import PLANNED_ARCHITECTURES, ModelShape, shape_from_files
from specpilot.plan.effective import effective_args
from specpilot.plan.planners import planner_for
from specpilot.plan.provenance import provenance
from specpilot.plan.types import Plan, Problem, Term
from specpilot.spec import Spec

__all__ = ["Fix", "Plan", "Problem", "Term", "make_plan", "plan_inputs"]


def plan_inputs(spec: Spec, files: ModelRead | None = None) -> tuple[ModelShape, EffectiveArgs]:
    """The model shape (config.json as the command read it on the spec's host: `files`), and
    the flags as `check`'s rules evaluate them for that model."""
    from specpilot.models.host_files import spec_model_files

    shape = shape_from_files(spec_model_files(spec, files))
    return shape, effective_args(spec, shape)


def make_plan(
    spec: Spec, measured: Mapping[str, float] | None = None, files: ModelRead | None = None
) -> Plan:
    """The plan for a spec, by its engine's planner; `measured` holds inputs read from a log,
    `files` the model's files as the command read them (`models.host_files.read_model`)."""
    release = engine_release(spec.engine.name, spec.engine.version)
    planner = planner_for(release.name)
    shape, args = plan_inputs(spec, files)
    plan = planner.plan(spec, shape, args, measured)
    plan.provenance = provenance(release)
    if shape.architecture not in PLANNED_ARCHITECTURES:
        plan.notes.insert(
            0,
            f"warning: architecture {shape.architecture} is not one this planner was checked on; its "
            "layers are planned as plain attention + MLP, so the verdict may be wrong: calibrate with "
            "--from-log (an engine startup log) before trusting it",
        )
    return plan
