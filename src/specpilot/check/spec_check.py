"""`check` for a whole spec: the model class from its config, GPU facts from `[gpu]`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.check.engine import check_args
from specpilot.check.fix import FixedLaunch, fix_launch
from specpilot.check.types import CheckResult
from specpilot.engines.fix import Fix
from specpilot.engines.flags import parse_version
from specpilot.engines.rules import Finding, GpuFacts
from specpilot.errors import UserError
from specpilot.models.host_files import ModelRead
from specpilot.spec import Spec


@dataclass(frozen=True)
class ModelFacts:
    """What the rules ask of the model; all None when its config could not be read."""

    architecture: str | None = None
    mtp_layers: int | None = None
    hybrid: bool | None = None
    #: config.json as read (on the spec's host): the context-length rules read it
    config: Mapping[str, Any] | None = None


def spec_model(spec: Spec, files: ModelRead | None = None) -> tuple[ModelFacts, list[Finding]]:
    """The spec model's facts (from `files`, the command's read of them), or none with a
    warning without a config."""
    from specpilot.models.host_files import spec_model_files
    from specpilot.models.shape import shape_from_files

    try:
        shape = shape_from_files(spec_model_files(spec, files))
        return ModelFacts(shape.architecture, shape.mtp_num_layers, shape.is_hybrid, shape.config), []
    except (UserError, OSError) as err:
        note = Finding(
            "model-config-missing",
            "warning",
            f"no readable config.json at [model] path ({err}); the rules that ask the model "
            "(its class, hybrid layers, MTP layers, context length) were not run",
        )
        return ModelFacts(), [note]


#: the parallel sizes whose product is the GPUs one server takes (SGLang's dest, vLLM's)
PARALLEL_DESTS = (("tp_size", "tensor_parallel_size"), ("pp_size", "pipeline_parallel_size"))


def _parallel_sizes(values: Mapping[str, object]) -> list[int]:
    """[tensor, pipeline] parallel sizes as check resolved them (1 when unset)."""
    sizes = []
    for dests in PARALLEL_DESTS:
        size = next((v for d in dests if isinstance(v := values.get(d), int)), 1)
        sizes.append(max(size, 1))
    return sizes


def idle_gpus(spec: Spec, result: CheckResult) -> Finding | None:
    """A warning when `[gpu] count` is more than one server uses: the rest would sit idle."""
    tp, pp = _parallel_sizes(result.effective_values)
    used = tp * pp
    if spec.gpu.count <= used:
        return None
    return Finding(
        "gpu-count-unused",
        "warning",
        f"[gpu] count = {spec.gpu.count} but one server uses {used} GPU{'s' * (used > 1)} "
        f"(tensor parallel {tp} x pipeline parallel {pp}): {spec.gpu.count - used} would sit idle",
        Fix(
            text=f"set --tp {spec.gpu.count // pp} to use them in one server, or start one server "
            "per GPU (a fleet) with [gpu] count = 1"
        ),
    )


def check_spec(spec: Spec, files: ModelRead | None = None) -> CheckResult:
    model, notes = spec_model(spec, files)
    result = check_args(
        spec.engine.name,
        spec.engine.version,
        spec.engine.args,
        spec.engine.env,
        model.architecture,
        GpuFacts(memory_gib=spec.gpu.memory_gib, name=spec.gpu.name),
        model.mtp_layers,
        model.hybrid,
        model.config,
    )
    result.findings[:0] = notes
    result.findings += [f for f in (idle_gpus(spec, result),) if f is not None]
    result.model_read = model.config is not None
    return result


def fix_spec(spec: Spec, files: ModelRead | None = None) -> FixedLaunch:
    model, notes = spec_model(spec, files)
    gpu = GpuFacts(memory_gib=spec.gpu.memory_gib, name=spec.gpu.name)

    def run(args: list[str], env: dict[str, str]) -> CheckResult:
        return check_args(
            spec.engine.name,
            spec.engine.version,
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
