"""`check` for a whole spec: the model class from its config, GPU facts from `[gpu]`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specpilot.check.engine import check_args, parse_version
from specpilot.check.fix import FixedLaunch, fix_launch
from specpilot.check.types import CheckResult, Finding, GpuFacts
from specpilot.errors import UserError
from specpilot.spec import Spec


def spec_model(spec: Spec) -> tuple[str | None, int | None, Mapping[str, Any] | None, list[Finding]]:
    """The spec model's HF architecture, MTP layer count and config, or Nones with a warning."""
    from specpilot.models.host_files import spec_model_files
    from specpilot.models.shape import shape_from_files

    try:
        shape = shape_from_files(spec_model_files(spec))
        return shape.architecture, shape.mtp_num_layers, shape.config, []
    except (UserError, OSError) as err:
        note = Finding(
            "model-config-missing",
            "warning",
            f"no readable config.json at [model] path ({err}); model-class rules (hybrid/mamba) "
            "and the context-length check were skipped",
        )
        return None, None, None, [note]


def check_spec(spec: Spec) -> CheckResult:
    architecture, mtp_layers, config, notes = spec_model(spec)
    result = check_args(
        spec.engine.name,
        spec.engine.version,
        spec.engine.args,
        spec.engine.env,
        architecture,
        GpuFacts(memory_gib=spec.gpu.memory_gib),
        mtp_layers,
        config,
    )
    result.findings[:0] = notes
    return result


def fix_spec(spec: Spec) -> FixedLaunch:
    architecture, mtp_layers, config, notes = spec_model(spec)
    gpu = GpuFacts(memory_gib=spec.gpu.memory_gib)

    def run(args: list[str], env: dict[str, str]) -> CheckResult:
        return check_args(
            spec.engine.name, spec.engine.version, args, env, architecture, gpu, mtp_layers, config
        )

    fixed = fix_launch(
        run, spec.engine.name, parse_version(spec.engine.version), spec.engine.args, spec.engine.env
    )
    fixed.result.findings[:0] = notes
    return fixed
