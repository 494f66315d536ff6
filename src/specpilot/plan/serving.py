"""The knobs a spec that starts also needs to keep serving, added to the plan's recommendation.

A plan's verdict and its recommended knobs are about the start. Serving can take more: SGLang
with the radix cache on copies the SSM state of every request in one prefill batch that hits a
cached prefix, all at once (`quantities.mamba_cow_transient_gib`), so on a card the startup
leaves little free the server starts, then runs out of memory on its first such batch. Its bound
is `--prefill-max-requests`, the requests one prefill batch may take. The planner warns of it in
a note; this module turns the bound into flags, so `starts and serves with` and `plan --write`
give a spec that is safe to serve, not only to start. Each engine's bound is its planner's
`serving` (plan/planners.py); SGLang's is plan/sglang/serving.py.
"""

from __future__ import annotations

from dataclasses import replace

from specpilot.check.resolved import ResolvedSpec
from specpilot.engines.fix import Fix
from specpilot.engines.flags import parse_version
from specpilot.engines.logfacts import LogFacts
from specpilot.engines.registry import table_for
from specpilot.plan import make_plan
from specpilot.plan.planners import planner_for
from specpilot.plan.types import Plan
from specpilot.spec import Spec


def serving_args(resolved: ResolvedSpec, plan: Plan) -> list[str]:
    """The flags the spec (planned as `plan`) lacks to serve without running out of memory."""
    bound = planner_for(plan.engine).serving
    if bound is None:
        return []
    return bound(resolved.spec, resolved.shape, resolved.args, plan)


def with_fix(spec: Spec, fix: Fix) -> Spec:
    """The spec with a fix's flags and variables applied to its engine."""
    table = table_for(spec.engine.name, parse_version(spec.engine.version))
    args, env = fix.apply(table, spec.engine.args, spec.engine.env)
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": args, "env": env})})


def with_serving_args(resolved: ResolvedSpec, plan: Plan, facts: LogFacts | None = None) -> Plan:
    """The plan with what the recommended spec (the spec as given when the plan recommends
    nothing) needs to serve added to its `recommended_args`, planned again with the
    recommendation; the plan itself when it needs nothing."""
    if planner_for(plan.engine).serving is None or not (plan.fits or plan.recommended_args):
        return plan
    target = resolved
    target_plan = plan
    if plan.recommended_args or plan.recommended_env:
        fix = Fix(args=tuple(plan.recommended_args), env=dict(plan.recommended_env))
        target = target.respec(with_fix(target.spec, fix))
        target_plan = make_plan(target, facts)
    if not target_plan.fits:
        return plan
    added = serving_args(target, target_plan)
    return replace(plan, recommended_args=[*plan.recommended_args, *added])
