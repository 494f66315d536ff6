"""Calibration: replace estimates with what a real engine measured.

Two numbers decide most of a plan and are hard to know in advance: the free
memory the engine saw before loading weights (CUDA context, other processes,
driver reserve) and the memory the weights took. A previous run's log states
both; with them the plan predicts the KV token count to within the engine's
own rounding. The spec records them as `[gpu] free_before_load_gib` and
`[model] weights_gib`; a log can supply them (`specpilot plan --from-log`).
A log of another engine, release, model or parallelism, or one that stops before
the weights finished loading, is refused (`log_checks`).
"""

from __future__ import annotations

from pathlib import Path

from specpilot.check.resolved import ResolvedSpec
from specpilot.engines.logfacts import LogFacts
from specpilot.errors import UserError
from specpilot.plan.log_checks import refuse_foreign_log, refuse_other_engine, refuse_unfinished_load
from specpilot.plan.planners import planner_for
from specpilot.spec import Spec


def calibrate_from_log(resolved: ResolvedSpec, log_path: str | Path) -> tuple[Spec, LogFacts]:
    """The spec with measured values from an engine log, and what the log printed.

    The spec carries the two values it has keys for (free memory before load,
    weight memory); the returned facts carry those and any other measured input
    the engine's planner uses (e.g. vLLM's peak activation).
    """
    path = Path(log_path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise UserError(
            f"cannot read the log ({err.strerror})",
            field="--from-log",
            fix="give the path of a saved engine log (specpilot logs NAME > engine.log writes one)",
        ) from None
    return calibrate_from_text(resolved, text, str(path))


def calibrate_from_text(resolved: ResolvedSpec, text: str, source: str) -> tuple[Spec, LogFacts]:
    """`calibrate_from_log` on a log already read (`source` names it in errors)."""
    spec, engine = resolved.spec, resolved.release.engine
    refuse_other_engine(spec, engine, text)
    refuse_unfinished_load(engine, text)
    planner = planner_for(spec.engine.name)
    facts = planner.read_log(text)
    # the numbers the plan predicts, and the server's settings, are compared, never fed back
    measured = facts.measured_inputs()
    if not measured:
        raise UserError(
            f"found no memory numbers of a {spec.engine.name} startup in {source}",
            field="--from-log",
            fix=f"give the log of a {spec.engine.name} start that got at least past weight loading",
        )
    refuse_foreign_log(resolved, facts, planner.refuse_other_footprint)
    gpu, model = spec.gpu, spec.model
    if facts.free_before_load_gib is not None:
        gpu = gpu.model_copy(update={"free_before_load_gib": float(facts.free_before_load_gib)})
    if facts.weights_gib is not None:
        model = model.model_copy(update={"weights_gib": float(facts.weights_gib)})
    return spec.model_copy(update={"gpu": gpu, "model": model}), facts
