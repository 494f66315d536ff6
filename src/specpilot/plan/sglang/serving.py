"""What an SGLang spec that starts also needs to keep serving: the bound on state copies.

With the radix cache on, every request in one prefill batch that hits a cached prefix copies
that prefix's SSM state into its own slot, all at once (`quantities.mamba_cow_transient_gib`):
on a card the startup leaves little free, the server starts, then runs out of memory on its
first such batch. `--prefill-max-requests` bounds the requests one prefill batch may take.
"""

from __future__ import annotations

from dataclasses import replace

from specpilot.check.effective import EffectiveArgs
from specpilot.models.shape import ModelShape
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.planner import planner_settings
from specpilot.plan.types import Plan, SglangDetails
from specpilot.spec import Spec


def state_copy_bound(spec: Spec, shape: ModelShape, args: EffectiveArgs, plan: Plan) -> list[str]:
    """`--prefill-max-requests N`, N the state copies the memory left after startup holds
    (`--disable-radix-cache` when it holds none); nothing when every running request's fits."""
    if not isinstance(plan.details, SglangDetails):
        return []
    settings = planner_settings(spec, shape, args)
    left_gib = max(plan.details.margin_gib, 0.0)
    if q.mamba_cow_transient_gib(shape, settings, plan.max_running_requests) <= left_gib:
        return []
    per_copy_gib = q.mamba_cow_transient_gib(shape, replace(settings, prefill_max_requests=None), 1)
    fitting = int(left_gib // per_copy_gib)
    return ["--prefill-max-requests", str(fitting)] if fitting else ["--disable-radix-cache"]
