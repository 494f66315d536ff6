"""`check` for a whole spec: the model class from its config, GPU facts from `[gpu]`."""

from __future__ import annotations

from specpilot.check.engine import check_args, parse_version
from specpilot.check.fix import FixedLaunch, fix_launch
from specpilot.check.types import CheckResult, Finding, GpuFacts
from specpilot.errors import UserError
from specpilot.spec import Spec


def spec_model(spec: Spec) -> tuple[str | None, int | None, list[Finding]]:
    """The spec model's HF architecture and MTP layer count, or None with a warning without a config."""
    from specpilot.models.shape import load_model_shape

    try:
        shape = load_model_shape(spec.model_dir())
        return shape.architecture, shape.mtp_num_layers, []
    except (UserError, OSError) as err:
        note = Finding(
            "model-config-missing",
            "warning",
            f"no readable config.json at [model] path ({err}); model-class rules (hybrid/mamba) were skipped",
        )
        return None, None, [note]


def refuse_unmodelled_release(spec: Spec) -> None:
    """The releases `check` and `plan` both stand behind: a version the planner refuses
    (vLLM 0.0.1) is refused here too, rather than checked against the nearest table."""
    if spec.engine.name == "vllm":
        from specpilot.plan.vllm_lines import vllm_line

        vllm_line(spec.engine.version)
    else:
        from specpilot.plan.sglang_releases import release_rules

        release_rules(spec.engine.version)


def check_spec(spec: Spec) -> CheckResult:
    refuse_unmodelled_release(spec)
    architecture, mtp_layers, notes = spec_model(spec)
    result = check_args(
        spec.engine.name,
        spec.engine.version,
        spec.engine.args,
        spec.engine.env,
        architecture,
        GpuFacts(memory_gib=spec.gpu.memory_gib),
        mtp_layers,
    )
    result.findings[:0] = notes
    return result


def fix_spec(spec: Spec) -> FixedLaunch:
    refuse_unmodelled_release(spec)
    architecture, mtp_layers, notes = spec_model(spec)
    gpu = GpuFacts(memory_gib=spec.gpu.memory_gib)

    def run(args: list[str], env: dict[str, str]) -> CheckResult:
        return check_args(spec.engine.name, spec.engine.version, args, env, architecture, gpu, mtp_layers)

    fixed = fix_launch(
        run, spec.engine.name, parse_version(spec.engine.version), spec.engine.args, spec.engine.env
    )
    fixed.result.findings[:0] = notes
    return fixed
