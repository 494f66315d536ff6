"""`check` for a whole spec: the model class from its config, GPU facts from `[gpu]`."""

from __future__ import annotations

from specpilot.check.engine import check_args, parse_version
from specpilot.check.fix import FixedLaunch, fix_launch
from specpilot.check.types import CheckResult, Finding, GpuFacts
from specpilot.errors import UserError
from specpilot.spec import Spec


def spec_architecture(spec: Spec) -> tuple[str | None, list[Finding]]:
    """The HF architecture of the spec's model, or None with a warning when there is no config."""
    from specpilot.models.shape import load_model_shape

    try:
        return load_model_shape(spec.model_dir()).architecture, []
    except (UserError, OSError) as err:
        note = Finding(
            "model-config-missing",
            "warning",
            f"no readable config.json at [model] path ({err}); model-class rules (hybrid/mamba) were skipped",
        )
        return None, [note]


def check_spec(spec: Spec) -> CheckResult:
    architecture, notes = spec_architecture(spec)
    result = check_args(
        spec.engine.name,
        spec.engine.version,
        spec.engine.args,
        spec.engine.env,
        architecture,
        GpuFacts(memory_gib=spec.gpu.memory_gib),
    )
    result.findings[:0] = notes
    return result


def fix_spec(spec: Spec) -> FixedLaunch:
    architecture, notes = spec_architecture(spec)
    gpu = GpuFacts(memory_gib=spec.gpu.memory_gib)

    def run(args: list[str], env: dict[str, str]) -> CheckResult:
        return check_args(spec.engine.name, spec.engine.version, args, env, architecture, gpu)

    fixed = fix_launch(
        run, spec.engine.name, parse_version(spec.engine.version), spec.engine.args, spec.engine.env
    )
    fixed.result.findings[:0] = notes
    return fixed
