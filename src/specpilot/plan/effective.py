"""The planner's view of the flags: `check`'s evaluation of the rules, never a resolver of its own.

One direction only: spec -> `check_args` (release defaults, the flags as typed, the engine's
own adjustments as tested rules) -> `EffectiveArgs` -> the planner's arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from specpilot.check.effective import EffectiveArgs
from specpilot.check.engine import check_release
from specpilot.engines.adapter import EngineRelease
from specpilot.engines.fix import Fix
from specpilot.engines.registry import engine_release
from specpilot.engines.rules import GpuFacts
from specpilot.models.shape import ModelShape
from specpilot.spec import Spec


def evaluate(
    release: EngineRelease,
    argv: Sequence[str],
    env: Mapping[str, str],
    shape: ModelShape,
    gpu_memory_gib: float,
    gpu_name: str | None = None,
) -> EffectiveArgs:
    """One launch's flags as `release` will run them, for a model of this shape."""
    result = check_release(
        release,
        list(argv),
        dict(env),
        shape.architecture,
        GpuFacts(memory_gib=gpu_memory_gib, name=gpu_name),
        shape.mtp_num_layers,
        shape.is_hybrid,
        shape.config,
    )
    return EffectiveArgs.from_result(result, release)


def effective_args(
    spec: Spec, shape: ModelShape, argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> EffectiveArgs:
    """The spec's flags (or `argv`/`env` in their place) as the engine will run them: its
    release looked up by name (the planner's tests; a planner has its `EffectiveArgs.release`)."""
    return evaluate(
        engine_release(spec.engine.name, spec.engine.version),
        spec.engine.args if argv is None else argv,
        spec.engine.env if env is None else env,
        shape,
        spec.gpu.memory_gib,
        spec.gpu.name,
    )


def effective_args_without(
    spec: Spec, shape: ModelShape, args: EffectiveArgs, dropped: Callable[[str], bool]
) -> EffectiveArgs:
    """The same launch (evaluated as `args`) with every flag whose dest `dropped` names removed,
    re-evaluated."""
    table = args.release.table
    spellings = tuple(s for s, flag in table.by_spelling.items() if dropped(flag.dest))
    argv, env = Fix(remove_args=spellings).apply(table, spec.engine.args, spec.engine.env)
    return evaluate(args.release, argv, env, shape, spec.gpu.memory_gib, spec.gpu.name)
