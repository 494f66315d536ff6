"""`specpilot check`: would the engine accept these flags, and what would it change on its own?"""

from __future__ import annotations

import json

import click
from rich.console import Console

from specpilot.check.fix import render_command
from specpilot.check.spec_check import check_spec, fix_spec
from specpilot.check.types import CheckResult, Finding
from specpilot.cli.inputs import PASSTHROUGH, resolve_spec
from specpilot.errors import EXIT_FAILED, EXIT_OK
from specpilot.launch.command import engine_program
from specpilot.secrets import mask_argv, mask_env, redact, redact_tree, secret_values

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "adjusts": "cyan"}


def _fix_text(finding: Finding) -> str:
    if finding.fix is None:
        return ""
    parts = [" ".join(finding.fix.args)] + [f"{k}={v}" for k, v in finding.fix.env.items()]
    parts += [f"drop {a}" for a in (*finding.fix.remove_args, *finding.fix.remove_env)]
    return "; ".join(p for p in parts if p)


def _print_human(result: CheckResult, secrets: list[str]) -> None:
    console = Console(highlight=False)
    verdict = "[green]accepted[/green]" if result.ok else "[bold red]rejected[/bold red]"
    console.print(f"{result.engine} {result.version}: {verdict}")
    for finding in result.findings:
        style = SEVERITY_STYLE[finding.severity]
        console.print(f"[{style}]{finding.severity:8}[/{style}] {finding.rule}")
        console.print(f"         {redact(finding.message, secrets)}", markup=False)
        if fix := _fix_text(finding):
            console.print(f"         fix: {redact(fix, secrets)}", markup=False)
    console.print("effective args: " + " ".join(mask_argv(result.effective_args)), markup=False)


@click.command("check", context_settings=PASSTHROUGH)
@click.argument("target", nargs=-1, type=click.UNPROCESSED, metavar="SPEC | -- COMMAND...")
@click.option("--engine-version", help="Engine release for a pasted command (default: newest supported).")
@click.option(
    "--gpu-memory-gib",
    type=float,
    default=96.0,
    show_default=True,
    help="Per-GPU memory for a pasted command.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--fix",
    "fix",
    is_flag=True,
    help="Print the corrected launch command (args and env) for the same release.",
)
def check(
    target: tuple[str, ...], engine_version: str | None, gpu_memory_gib: float, as_json: bool, fix: bool
) -> None:
    """Check engine flags against the release's own rules before anything starts.

    \b
    Examples:
      specpilot check examples/qwen36-27b-mtp-nobuffer-sglang.toml
      specpilot check --engine-version 0.5.13 --fix -- \\
          SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server --model-path M \\
          --speculative-algorithm NEXTN --mamba-scheduler-strategy no_buffer

    Exit 0 when the engine would accept the flags, 1 when it would refuse them, 2 on bad input.
    """
    spec = resolve_spec(target, gpu_memory_gib=gpu_memory_gib, gpu_count=None, engine_version=engine_version)
    # --api-key and HF_TOKEN values never reach the terminal (or a CI log): they show as ***
    secrets = secret_values(spec.engine.env, spec.engine.args)
    result = check_spec(spec)
    payload: dict[str, object] = result.to_json()
    payload["effective_args"] = mask_argv(result.effective_args)
    payload["effective_env"] = mask_env(result.effective_env)
    if fix:
        fixed = fix_spec(spec)
        program, model_args = engine_program(spec, model_path=spec.model.path)
        command = render_command([*program, *model_args], mask_argv(fixed.args), mask_env(fixed.env))
        payload["fixed"] = {
            "ok": fixed.result.ok,
            "args": mask_argv(fixed.args),
            "env": mask_env(fixed.env),
            "command": command,
        }
    if as_json:
        click.echo(json.dumps(redact_tree(payload, secrets), indent=2))
    else:
        _print_human(result, secrets)
        if fix:
            heading = (
                "fixed command (passes)" if fixed.result.ok else "no passing command found; best attempt"
            )
            click.echo(f"{heading}:\n  {command}")
    if fix:
        # --fix succeeds when it produced a command the same release accepts
        raise SystemExit(EXIT_OK if fixed.result.ok else EXIT_FAILED)
    raise SystemExit(EXIT_OK if result.ok else EXIT_FAILED)
