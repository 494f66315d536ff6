"""`check` for a whole spec: the model class from its config, GPU facts from `[gpu]`."""

from __future__ import annotations

from dataclasses import replace

from specpilot.check.engine import check_release
from specpilot.check.fix import FixedLaunch, fix_launch
from specpilot.check.resolved import ResolvedSpec, model_facts, resolve
from specpilot.check.types import CheckResult
from specpilot.engines.flags import parse_version
from specpilot.engines.rules import GpuFacts
from specpilot.spec import Spec


def check_spec(spec: Spec) -> CheckResult:
    """Check a whole spec, its model read on its host (`resolve`: check and plan of one command
    read one resolution)."""
    return resolve(spec).check


def fix_spec(resolved: ResolvedSpec) -> FixedLaunch:
    """`check --fix`: the spec's flags with every fix applied that makes the engine accept them."""
    spec, first = resolved.spec, resolved.evaluation
    model, notes = model_facts(resolved.model_shape, resolved.model_error)
    gpu = GpuFacts(memory_gib=spec.gpu.memory_gib, name=spec.gpu.name)
    given = (list(spec.engine.args), dict(spec.engine.env))

    def run(args: list[str], env: dict[str, str]) -> CheckResult:
        if (args, env) == given:  # the launch as given: evaluated already
            return replace(first, findings=list(first.findings))
        return check_release(
            resolved.release,
            args,
            env,
            model.architecture,
            gpu,
            model.mtp_layers,
            model.hybrid,
            model.config,
        )

    fixed = fix_launch(
        run, spec.engine.name, parse_version(spec.engine.version), spec.engine.args, spec.engine.env
    )
    fixed.result.findings[:0] = notes
    fixed.result.model_read = model.config is not None
    return fixed
