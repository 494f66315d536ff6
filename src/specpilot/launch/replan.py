"""Close the loop: when a start proves the plan wrong, plan again from what the engine printed.

A plan rests on two numbers it can only estimate before the engine runs: the free memory the
engine sees before loading (other processes, the driver, the card's real size) and what the
weights take. Every engine prints both while it starts. When a start runs out of memory, or
reaches ready with allocations more than 5% away from the plan, those printed numbers replace
the estimates (`plan.calibrate`), the planner recommends the knobs again, and `up` can start
once more with them. Nothing changes silently: the reason and every changed flag are printed,
and the re-planned spec keeps the measured values so a later `plan` of it agrees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.check.parse import parse_argv
from specpilot.check.resolved import ResolvedSpec
from specpilot.engines.adapter import EngineRelease
from specpilot.engines.fix import Fix
from specpilot.launch.outcome import UpResult
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_text
from specpilot.plan.planners import planner_for
from specpilot.plan.types import Plan, SglangDetails
from specpilot.spec import Spec

#: measured inputs compared with the plan's assumptions when saying why it was wrong
_INPUTS = (("free_before_load_gib", "free memory before loading"), ("weights_gib", "target weights"))


def _assumed_gib(planned: Plan) -> dict[str, float]:
    """What the plan assumed for the inputs a log measures (`_INPUTS`, by the log's names)."""
    assumed = {"weights_gib": planned.weights_gib}
    if isinstance(planned.details, SglangDetails):  # vLLM's plan does not estimate free memory
        assumed["free_before_load_gib"] = planned.details.free_before_load_gib
    return assumed


@dataclass(frozen=True)
class Replan:
    """The spec to start next and, in words, why and what changed."""

    spec: Spec
    reasons: tuple[str, ...]
    changes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"reasons": list(self.reasons), "changes": list(self.changes)}


def replan_reason(result: UpResult) -> str | None:
    """Why this outcome calls for a re-plan (None: it does not): a memory failure, or a
    ready server whose allocations are more than 5% from the plan."""
    if result.phase == "failed" and result.cause == "oom":
        return "the engine ran out of memory"
    if result.phase == "ready":
        off = [d for d in result.plan_diff if d["warn"]]
        if off:
            return "; ".join(
                f"{d['key']} is {d['engine']:,}, the plan said {d['planned']:,} ({d['diff_pct']:+.1f}%)"
                for d in off
            )
    return None


def _changes(
    spec: Spec, release: EngineRelease, old: Sequence[str], new: Sequence[str], env: Mapping[str, str]
) -> list[str]:
    """Each flag whose value differs (as the release's argparse reads both argvs), then the
    environment the new launch sets differently."""
    before = parse_argv(release, list(old))
    after = parse_argv(release, list(new))
    lines = [
        f"{after.spelled.get(dest, dest)} {before.values.get(dest, '(unset)')} -> {value}"
        for dest, value in after.values.items()
        if before.values.get(dest) != value
    ]
    lines += [
        f"{name}={value} (environment)" for name, value in env.items() if spec.engine.env.get(name) != value
    ]
    return lines


def replan(resolved: ResolvedSpec, log_text: str, planned: Plan | None) -> Replan | None:
    """The spec (resolved by its command: its model read once) re-planned from the engine's
    printed numbers, or None when the planner, given them, recommends exactly what ran
    (restarting would change nothing).

    Raises UserError when the log cannot calibrate (another engine's, or cut before the
    weights loaded: then nothing was measured)."""
    spec = resolved.spec
    calibrated, facts = calibrate_from_text(resolved, log_text, "the engine's log")
    plan = make_plan(resolved.respec(calibrated), facts)
    if not plan.recommended_args:
        return None
    table = resolved.release.table
    fix = Fix(args=tuple(plan.recommended_args), env=dict(plan.recommended_env))
    args, env = fix.apply(table, spec.engine.args, spec.engine.env)
    changes = _changes(spec, resolved.release, spec.engine.args, args, env)
    rule = planner_for(spec.engine.name).replan_rule
    found = rule(log_text, plan) if rule is not None and not changes else None
    if found is not None:
        # the engine's own rule for what the re-plan alone would not move (SGLang: a capture OOM)
        fix = Fix(args=(*plan.recommended_args, *found[0]), env=dict(plan.recommended_env))
        args, env = fix.apply(table, spec.engine.args, spec.engine.env)
        changes = _changes(spec, resolved.release, spec.engine.args, args, env)
    if not changes:
        return None
    assumed = _assumed_gib(planned) if planned else {}
    measured = facts.measured_inputs()
    reasons = [
        f"the engine printed {label} {measured[key]:.2f} GiB; the plan assumed {assumed[key]:.2f} GiB"
        for key, label in _INPUTS
        if key in measured and key in assumed and abs(measured[key] - assumed[key]) >= 0.01
    ]
    if found is not None:
        reasons.append(found[1])
    engine = calibrated.engine.model_copy(update={"args": args, "env": env})
    return Replan(calibrated.model_copy(update={"engine": engine}), tuple(reasons), tuple(changes))
