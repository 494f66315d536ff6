"""What `plan`, `check` and `up` take: a spec file, or a pasted launch command after `--`."""

from __future__ import annotations

from pathlib import Path

import click

from specpilot.errors import UserError
from specpilot.spec import Spec, load_spec, spec_from_command

#: lets `specpilot plan -- python -m sglang.launch_server --tp 2` pass the engine's flags through
PASSTHROUGH = {"ignore_unknown_options": True}


def spec_options(func: click.decorators.FC) -> click.decorators.FC:
    """Options that complete a pasted command into a spec (ignored with a spec file)."""
    func = click.option("--engine-version", help="Engine release (default: newest supported).")(func)
    func = click.option("--gpu-count", type=click.IntRange(1), help="GPUs (default: from --tp).")(func)
    func = click.option("--gpu-memory-gib", type=float, help="Total memory per GPU in GiB.")(func)
    func = click.argument("spec_or_command", nargs=-1, type=click.UNPROCESSED)(func)
    return func


def resolve_spec(
    spec_or_command: tuple[str, ...],
    *,
    gpu_memory_gib: float | None,
    gpu_count: int | None,
    engine_version: str | None,
) -> Spec:
    """A spec file path, or the tokens of a pasted launch command."""
    tokens = list(spec_or_command)
    if not tokens:
        raise UserError("nothing to read", field="SPEC", fix="give a spec file, or `-- <launch command>`")
    if len(tokens) == 1 and (tokens[0].endswith(".toml") or Path(tokens[0]).is_file()):
        spec = load_spec(tokens[0])
        if engine_version:
            spec = spec.model_copy(
                update={"engine": spec.engine.model_copy(update={"version": engine_version})}
            )
        return spec
    return spec_from_command(
        tokens, gpu_memory_gib=gpu_memory_gib, gpu_count=gpu_count, engine_version=engine_version
    )
