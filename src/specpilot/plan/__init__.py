"""Memory planning: spec -> model shape -> per-engine arithmetic -> Plan."""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.engines.args import EngineArgs, parse_engine_args
from specpilot.fixes import Fix
from specpilot.models.shape import ModelShape, shape_from_files
from specpilot.plan.types import Plan, Problem, Term
from specpilot.spec import Spec

__all__ = ["Fix", "Plan", "Problem", "Term", "make_plan", "plan_inputs"]


def plan_inputs(spec: Spec) -> tuple[ModelShape, EngineArgs]:
    """The model shape and parsed engine flags every planner and rule reads."""
    from specpilot.models.host_files import spec_model_files

    shape = shape_from_files(spec_model_files(spec))
    args = parse_engine_args(spec.engine.name, spec.engine.version, spec.engine.args)
    return shape, args


def make_plan(spec: Spec, measured: Mapping[str, float] | None = None) -> Plan:
    """The plan for a spec, by its engine's planner; `measured` holds inputs read from a log."""
    shape, args = plan_inputs(spec)
    if spec.engine.name == "sglang":
        from specpilot.plan.sglang import plan_sglang

        return plan_sglang(spec, shape, args, measured)
    from specpilot.plan.vllm import plan_vllm

    return plan_vllm(spec, shape, args, measured)
