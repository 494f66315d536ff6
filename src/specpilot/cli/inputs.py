"""What `plan`, `check` and `up` take: a spec file, or a pasted launch command after `--`."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import click

from specpilot.errors import UserError
from specpilot.spec import Spec, load_spec, spec_from_command

#: lets `specpilot plan -- python -m sglang.launch_server --tp 2` pass the engine's flags through
PASSTHROUGH = {"ignore_unknown_options": True}

_NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d*)?$|^-\.\d+$")


class SpecCommand(click.Command):
    """A command that takes a spec or, after `--`, a pasted launch command (PASSTHROUGH lets the
    engine's flags through). An option before `--` that the command lacks is a typo of one of
    its own (`--gpu-memroy-gib`, `--fx`), refused with click's suggestion like any other command's,
    not read as the start of a launch command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ours = args[: args.index("--")] if "--" in args else args
        known = {opt for param in self.get_params(ctx) for opt in (*param.opts, *param.secondary_opts)}
        for token in ours:
            name = token.split("=", 1)[0]
            if name.startswith("-") and name not in known and not _NEGATIVE_NUMBER.match(name):
                possibilities = difflib.get_close_matches(name, sorted(known))
                hint = "" if possibilities else " (a pasted launch command goes after --)"
                raise click.NoSuchOption(
                    name, message=f"No such option: {name}{hint}", possibilities=possibilities, ctx=ctx
                )
        return super().parse_args(ctx, args)


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
    if len(tokens) == 1 and _missing_file_name(tokens[0]):
        raise UserError(
            "no such spec file",
            field=tokens[0],
            fix=_nearest_spec_file(Path(tokens[0])) + "a launch command goes after --",
        )
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


def _missing_file_name(token: str) -> bool:
    """`spec.tom`: one word with a suffix that names no file (a whole command pasted as one
    string has spaces; a missing .toml is load_spec's to refuse)."""
    path = Path(token)
    one_word = len(token.split()) == 1
    return one_word and not token.endswith(".toml") and bool(path.suffix) and not path.exists()


def _nearest_spec_file(path: Path) -> str:
    """`did you mean spec.toml? ` for a mistyped spec file name (`spec.tom`), else nothing."""
    folder = path.parent if str(path.parent) else Path(".")
    names = [p.name for p in folder.glob("*.toml")] if folder.is_dir() else []
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.8)
    return f"did you mean {folder / close[0] if str(path.parent) != '.' else close[0]}? " if close else ""
