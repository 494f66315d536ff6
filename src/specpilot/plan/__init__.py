"""Memory planning: spec -> model shape -> per-engine arithmetic -> Plan."""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.engines.args import EngineArgs, parse_engine_args
from specpilot.fixes import Fix
from specpilot.models.shape import PLANNED_ARCHITECTURES, ModelShape, load_model_shape
from specpilot.plan.types import Plan, Problem, Term
from specpilot.spec import Spec

__all__ = ["Fix", "Plan", "Problem", "Term", "make_plan", "plan_inputs"]


def plan_inputs(spec: Spec) -> tuple[ModelShape, EngineArgs]:
    """The model shape and parsed engine flags every planner and rule reads."""
    shape = load_model_shape(spec.model_dir())
    args = parse_engine_args(spec.engine.name, spec.engine.version, spec.engine.args)
    return shape, args


def make_plan(spec: Spec, measured: Mapping[str, float] | None = None) -> Plan:
    """The plan for a spec, by its engine's planner; `measured` holds inputs read from a log."""
    shape, args = plan_inputs(spec)
    if spec.engine.name == "sglang":
        from specpilot.plan.sglang import plan_sglang

        plan = plan_sglang(spec, shape, args, measured)
    else:
        from specpilot.plan.vllm import plan_vllm

        plan = plan_vllm(spec, shape, args, measured)
    if shape.architecture not in PLANNED_ARCHITECTURES:
        plan.notes.insert(
            0,
            f"warning: architecture {shape.architecture} is not one this planner was checked on; its "
            "layers are planned as plain attention + MLP, so the verdict may be wrong: calibrate with "
            "--from-log (an engine startup log) before trusting it",
        )
    return plan
