"""`specpilot check`: would the engine accept these flags, and what would it change on its own?"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

import click

from specpilot.check.fix import render_command
from specpilot.check.resolved import resolve
from specpilot.check.spec_check import fix_spec
from specpilot.check.types import CheckResult
from specpilot.cli.inputs import PASSTHROUGH, SpecCommand, resolve_spec
from specpilot.cli.output import Human, Output, json_option
from specpilot.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, UserError
from specpilot.launch.command import engine_program
from specpilot.models.host_files import read_model
from specpilot.secrets import mask_argv, mask_env, redact, redact_tree, secret_values
from specpilot.spec import Spec, spec_to_toml

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "adjusts": "cyan"}


def verdict(result: CheckResult, no_model: bool) -> tuple[str, int]:
    """What the check rests on, in words, and the exit code: a launch checked without its
    model is not "accepted" (the incident's rejected flags pass every rule that does not ask
    the model) unless --no-model says that is what the user wants."""
    if not result.ok:
        return "rejected", EXIT_FAILED
    if result.model_read:
        return "accepted", EXIT_OK
    skipped = f"{result.model_rules_not_run} model rules not run"
    if no_model:
        return f"accepted without the model ({skipped}: --no-model)", EXIT_OK
    return f"checked without the model: {skipped}", EXIT_BAD_INPUT


def fixed_spec_text(spec: Spec, args: list[str], env: dict[str, str], new_path: Path) -> str:
    """The spec with the fixed args and env; a relative model path still names the same folder."""
    model = spec.model.path
    base = spec.source_path.parent if spec.source_path else Path.cwd()
    if not Path(model).expanduser().is_absolute() and (base / model).exists():
        model = os.path.relpath(base / model, new_path.resolve().parent)
    fixed = spec.model_copy(
        update={
            "model": spec.model.model_copy(update={"path": model}),
            "engine": spec.engine.model_copy(update={"args": args, "env": env}),
        }
    )
    return spec_to_toml(fixed)


def write_new_spec(path: Path, text: str, *, field: str = "--write") -> None:
    """Write a new spec file; one that exists is refused (never overwritten)."""
    if path.exists():
        raise UserError(
            "already exists; --write creates a new file and never overwrites",
            field=f"{field} {path}",
            fix="choose another file name, or move the old file away first",
        )
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(
            f"cannot be written ({err.strerror})", field=f"{field} {path}", fix="choose a writable path"
        ) from None


@click.command("check", cls=SpecCommand, context_settings=PASSTHROUGH)
@click.argument("target", nargs=-1, type=click.UNPROCESSED, metavar="SPEC | -- COMMAND...")
@click.option("--engine-version", help="Engine release for a pasted command (default: newest supported).")
@click.option(
    "--gpu-memory-gib",
    type=float,
    default=96.0,
    show_default=True,
    help="Per-GPU memory for a pasted command.",
)
@json_option("Print one JSON object.")
@click.option(
    "--fix",
    "fix",
    is_flag=True,
    help="Print the corrected launch command (args and env) for the same release.",
)
@click.option(
    "--write",
    "write_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the corrected spec to this new file (implies --fix; never overwrites).",
)
@click.option(
    "--no-model",
    is_flag=True,
    help="Accept a check without the model's config.json (its model rules not run) as a pass.",
)
def check(
    target: tuple[str, ...],
    engine_version: str | None,
    gpu_memory_gib: float,
    out: Output,
    fix: bool,
    write_path: Path | None,
    no_model: bool,
) -> None:
    """Check engine flags against the release's own rules before anything starts.

    \b
    Examples:
      specpilot check examples/qwen36-27b-mtp-nobuffer-sglang.toml
      specpilot check --engine-version 0.5.13 --fix -- \\
          SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server \\
          --model-path examples/models/qwen3.6-27b \\
          --speculative-algorithm NEXTN --mamba-scheduler-strategy no_buffer
      specpilot check --fix --write fixed.toml examples/qwen36-27b-mtp-nobuffer-sglang.toml

    Exit 0 when the engine would accept the flags as given, 1 when it would refuse them,
    2 on bad input. Without a readable config.json at the model path the rules that ask
    the model cannot run: the verdict is "checked without the model", exit 2, unless
    --no-model accepts that. --fix and --write do not change the exit code: it is always
    the verdict on the flags given (the fixed command's verdict is printed, and is
    `fixed.ok` in --json). --fix renames a mistyped flag to the release's nearest one and
    never drops a speculation, memory, parallelism or model flag: it names that change
    instead. --write writes the corrected spec only when the fixed command passes (with
    the model read, or --no-model).
    """
    fix = fix or write_path is not None
    spec = resolve_spec(target, gpu_memory_gib=gpu_memory_gib, gpu_count=None, engine_version=engine_version)
    # --api-key and HF_TOKEN values never reach the terminal (or a CI log): they show as ***
    secrets = secret_values(spec.engine.env, spec.engine.args)
    # the model read once, in this command's loop, for the check and its fix
    resolved = resolve(spec, asyncio.run(read_model(spec)))
    result = resolved.check
    # and a value a fix moves to a secret flag (`--api-kye sk-...` renamed to --api-key)
    secrets = sorted(
        {*secrets, *result.fix_secrets()},
        key=len,
        reverse=True,
    )
    payload: dict[str, object] = result.to_json()
    payload["effective_args"] = mask_argv(result.effective_args)
    payload["effective_env"] = mask_env(result.effective_env)
    words, code = verdict(result, no_model)
    payload["verdict"] = words
    fixed_shown: _Fixed | None = None
    if fix:
        fixed = fix_spec(resolved)
        fixed_words, fixed_code = verdict(fixed.result, no_model)
        program, model_args = engine_program(spec, resolved.release.engine, model_path=spec.model.path)
        command = render_command([*program, *model_args], mask_argv(fixed.args), mask_env(fixed.env))
        written: str | None = None
        if write_path is not None and fixed_code == EXIT_OK:
            # the new spec file holds the real values, as the spec it was made from does
            write_new_spec(write_path, fixed_spec_text(spec, fixed.args, fixed.env, write_path))
            written = str(write_path)
        payload["fixed"] = {
            "ok": fixed.result.ok,
            "verdict": fixed_words,
            "args": mask_argv(fixed.args),
            "env": mask_env(fixed.env),
            "command": command,
            "refused": [redact(line, secrets) for line in fixed.refused],
            "written": written,
        }
        fixed_shown = _Fixed(fixed_words, fixed_code, command, fixed.refused, write_path, written)
    out.show(_CheckShown(result, payload, secrets, words, code, fixed_shown))
    raise SystemExit(code)


@dataclass(frozen=True)
class _Fixed:
    """`--fix`: the fixed command, its verdict, and what `--write` did."""

    words: str
    code: int
    command: str
    refused: list[str]
    write_path: Path | None
    written: str | None

    def human(self, out: Human, secrets: list[str]) -> None:
        if self.code == EXIT_OK:
            heading = (
                "fixed command (passes)" if self.words == "accepted" else f"fixed command ({self.words})"
            )
        elif self.refused:
            heading = "no passing command without dropping a flag you gave; best attempt"
        else:
            heading = f"no passing command found ({self.words}); best attempt"
        out.line(f"{heading}:\n  {self.command}")
        for line in self.refused:
            out.line(f"  not fixed: {redact(line, secrets)}")
        if self.written:
            out.line(f"corrected spec written to {self.written}")
        elif self.write_path is not None:
            out.line(f"nothing written to {self.write_path}: the fixed command is {self.words}")


@dataclass(frozen=True)
class _CheckShown:
    """The verdict, the findings and the effective args; with --fix the fixed command.
    Secret values show as *** in both forms."""

    result: CheckResult
    payload: dict[str, object]
    secrets: list[str]
    words: str
    code: int
    fixed: _Fixed | None

    def to_json(self) -> object:
        return redact_tree(self.payload, self.secrets)

    def human(self, out: Human) -> None:
        console = out.console(highlight=False)
        result, secrets = self.result, self.secrets
        style = "green" if self.code == EXIT_OK else "bold red"
        console.print(f"{result.engine} {result.version}: [{style}]{self.words}[/{style}]")
        for finding in result.findings:
            style = SEVERITY_STYLE[finding.severity]
            console.print(f"[{style}]{finding.severity:8}[/{style}] {finding.rule}")
            console.print(f"         {redact(finding.message, secrets)}", markup=False)
            if finding.fix and (fix := finding.fix.describe()):
                console.print(f"         fix: {redact(fix, secrets)}", markup=False)
        console.print("effective args: " + " ".join(mask_argv(result.effective_args)), markup=False)
        if self.fixed is not None:
            self.fixed.human(out, secrets)
