"""A spec resolved once per command: its engine release, its model read once on its host,
`check`'s one evaluation of its flags for that model, and the flags as the engine will run them.

`check`, `plan` and what builds on them read this record instead of resolving the spec again
(reading the model a second time, evaluating the rules again). A command that changes the
spec (check's fixes, a log's calibration, a recommendation) resolves the changed spec with the
files already read (`ResolvedSpec.respec`): the model is read once per command.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specpilot.check.effective import EffectiveArgs
from specpilot.check.engine import check_release
from specpilot.check.types import CheckResult
from specpilot.engines.adapter import EngineRelease
from specpilot.engines.context_len import requested_tokens
from specpilot.engines.fix import Fix
from specpilot.engines.registry import engine_release
from specpilot.engines.rules import Finding, GpuFacts
from specpilot.errors import UserError
from specpilot.models.files import ModelFiles
from specpilot.models.host_files import ModelRead
from specpilot.models.shape import ModelShape, shape_from_files
from specpilot.spec import Spec

#: why a model could not be read: check warns and runs without it, plan refuses with it
ModelError = UserError | OSError


@dataclass(frozen=True)
class ModelFacts:
    """What the rules ask of the model; all None when its config could not be read."""

    architecture: str | None = None
    mtp_layers: int | None = None
    hybrid: bool | None = None
    #: config.json as read (on the spec's host): the context-length rules read it
    config: Mapping[str, Any] | None = None


def model_facts(shape: ModelShape | None, error: ModelError | None) -> tuple[ModelFacts, list[Finding]]:
    """The model's facts, or none with a warning without a config."""
    if shape is not None:
        return ModelFacts(shape.architecture, shape.mtp_num_layers, shape.is_hybrid, shape.config), []
    note = Finding(
        "model-config-missing",
        "warning",
        f"no readable config.json at [model] path ({error}); the rules that ask the model "
        "(its class, hybrid layers, MTP layers, context length) were not run",
    )
    return ModelFacts(), [note]


def model_of(
    spec: Spec, read: ModelRead | None = None
) -> tuple[ModelFiles | None, ModelShape | None, ModelError | None]:
    """(files, shape, None) from `read`, the command's read of the model in its own event loop
    (`models.host_files.read_model`), or, without one, from a folder on this machine; where the
    model cannot be read, what was read and why not."""
    from specpilot.models.host_files import spec_model_files

    try:
        files = spec_model_files(spec, read)
        return files, shape_from_files(files), None
    except (UserError, OSError) as err:
        return (read if isinstance(read, ModelFiles) else None), None, err


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


@dataclass(frozen=True)
class ResolvedSpec:
    """One spec and everything resolved from it, once."""

    spec: Spec
    release: EngineRelease
    #: the model's files as read on the spec's host; None where they could not be read
    files: ModelFiles | None
    model_shape: ModelShape | None
    model_error: ModelError | None
    #: check's one evaluation of the spec's flags (its findings, the effective values), with
    #: what the spec adds (no model read, idle GPUs)
    check: CheckResult
    #: the same evaluation as the rules gave it, before the spec's findings (check --fix's start)
    evaluation: CheckResult
    #: the same values under the names the planners read
    args: EffectiveArgs

    @property
    def shape(self) -> ModelShape:
        """The model's shape; the read's own error where it could not be read."""
        if self.model_shape is None:
            raise self.model_error or UserError("no model read", field="[model] path")
        return self.model_shape

    def context_tokens(self) -> int | None:
        """The context the server runs with: its flag's value, else what the engine derives from
        the model's config; None where neither is known (no flag, no config read)."""
        engine = self.release.engine
        given = requested_tokens(self.args.get(engine.context_field)) if engine.context_field else None
        if given is not None:
            return given
        config = self.model_shape.config if self.model_shape is not None else None
        return engine.context_len(config) if config is not None else None

    def respec(self, spec: Spec) -> ResolvedSpec:
        """`spec`, a changed copy of this one, resolved: the model is not read again where it
        is the same, and the rules are not evaluated again where nothing they read changed."""
        if _model(spec) != _model(self.spec):
            return resolve(spec)
        if _launch(spec) == _launch(self.spec):
            return replace(self, spec=spec)
        same = (spec.engine.name, spec.engine.version) == (self.spec.engine.name, self.spec.engine.version)
        release = self.release if same else release_of(spec)
        return _evaluated(spec, release, self.files, self.model_shape, self.model_error)


def _model(spec: Spec) -> tuple[object, ...]:
    """Where a spec's model is read: a relative path as the folder it names beside the spec
    (a spec written elsewhere names the same folder by another relative path)."""
    path = spec.model.path
    if not (path.startswith("~") or Path(path).is_absolute()):
        path = str(spec.model_dir().resolve())
    return (spec.host, path)


def _launch(spec: Spec) -> tuple[object, ...]:
    """What check's evaluation of a spec reads, besides its model."""
    engine, gpu = spec.engine, spec.gpu
    return (engine.name, engine.version, engine.args, engine.env, gpu.memory_gib, gpu.name, gpu.count)


def resolve(spec: Spec, read: ModelRead | None = None) -> ResolvedSpec:
    """Resolve `spec`: its model from `read` (the command's read of it) or from a folder on
    this machine, its flags evaluated."""
    return _evaluated(spec, release_of(spec), *model_of(spec, read))


def release_of(spec: Spec) -> EngineRelease:
    """The spec's engine release: looked up once per spec a command resolves (a changed spec
    of the same engine release takes it over, `ResolvedSpec.respec`)."""
    return engine_release(spec.engine.name, spec.engine.version)


def _evaluated(
    spec: Spec,
    release: EngineRelease,
    files: ModelFiles | None,
    shape: ModelShape | None,
    error: ModelError | None,
) -> ResolvedSpec:
    facts, notes = model_facts(shape, error)
    evaluation = check_release(
        release,
        spec.engine.args,
        spec.engine.env,
        facts.architecture,
        GpuFacts(memory_gib=spec.gpu.memory_gib, name=spec.gpu.name),
        facts.mtp_layers,
        facts.hybrid,
        facts.config,
    )
    idle = [f for f in (idle_gpus(spec, evaluation),) if f is not None]
    result = replace(
        evaluation, findings=[*notes, *evaluation.findings, *idle], model_read=facts.config is not None
    )
    args = EffectiveArgs.from_result(result, release)
    return ResolvedSpec(spec, release, files, shape, error, result, evaluation, args)
