"""The planner of each engine, found by the engine adapter's name.

Why a registry here and not a field of the adapter: `engines/` is the bottom layer (it imports
only engines, errors and secrets: tests/core/test_layers.py), so an adapter cannot name its
planner, which lives above it in `plan/`. The dispatch therefore sits in `plan/`, one way:
`PLANNERS` holds one `Planner` per engine, keyed by `Planner.engine` (an adapter's `name`), and
`make_plan`, calibration and the log checks ask `planner_for`, never an if/else on the name. A
third engine is an adapter in `engines.registry.ENGINES` plus a `Planner` here (and its plan's
details record in `plan.types.ENGINE_DETAILS`, to read its plan.json back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specpilot.check.effective import EffectiveArgs
from specpilot.engines.logfacts import LogFacts
from specpilot.engines.registry import SGLANG, VLLM
from specpilot.errors import UserError
from specpilot.models.shape import ModelShape
from specpilot.plan.log_checks import FootprintCheck
from specpilot.plan.sglang.log import parse_sglang_log
from specpilot.plan.sglang.planner import capture_oom_replan, plan_sglang, refuse_other_sglang_footprint
from specpilot.plan.sglang.serving import state_copy_bound
from specpilot.plan.types import Plan
from specpilot.plan.vllm.log import parse_vllm_log
from specpilot.plan.vllm.planner import plan_vllm, refuse_other_vllm_footprint
from specpilot.spec import Spec

PlanFunction = Callable[[Spec, ModelShape, EffectiveArgs, LogFacts | None], Plan]
#: the flags a spec that starts (planned as the Plan) still lacks to keep serving
ServingBound = Callable[[Spec, ModelShape, EffectiveArgs, Plan], list[str]]
#: what a log printed, read by the engine's `loglines` quantities
LogReader = Callable[[str], LogFacts]
#: `up --replan`'s engine rule for a failed start whose re-plan recommends what ran:
#: (engine log, the re-plan) -> (flags to add, why), None where the rule has nothing
ReplanRule = Callable[[str, Plan], tuple[list[str], str] | None]


@dataclass(frozen=True)
class Planner:
    """What `plan` does for one engine."""

    engine: str
    #: the plan for a spec: (spec, model shape, check's effective flags, a log's facts)
    plan: PlanFunction
    read_log: LogReader
    refuse_other_footprint: FootprintCheck
    replan_rule: ReplanRule | None = None
    #: memory serving takes beyond the start, as flags that bound it (plan/serving.py); None:
    #: nothing known to grow past the start
    serving: ServingBound | None = None


PLANNERS: tuple[Planner, ...] = (
    Planner(
        SGLANG.name,
        plan_sglang,
        parse_sglang_log,
        refuse_other_sglang_footprint,
        replan_rule=capture_oom_replan,
        serving=state_copy_bound,
    ),
    Planner(VLLM.name, plan_vllm, parse_vllm_log, refuse_other_vllm_footprint),
)


def planner_for(engine: str) -> Planner:
    """The planner of a registered engine; one without a planner is said as such."""
    for planner in PLANNERS:
        if planner.engine == engine:
            return planner
    raise UserError(
        f"no planner for engine {engine!r}",
        field="[engine] name",
        fix="check works for it; plan needs a planner in specpilot.plan.planners",
    )
