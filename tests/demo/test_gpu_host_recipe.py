"""The demo's closing recipe for a GPU host goes as far as the demo does: to the exported data."""

from __future__ import annotations

import shlex
from pathlib import Path

from specpilot.cli.commands import COMMANDS
from specpilot.demo.run import gpu_host_next_steps


def test_the_recipe_ends_with_the_export_a_trainer_reads() -> None:
    recipe = gpu_host_next_steps(Path("specpilot-demo/demo.toml"))
    commands = [
        part.strip().split("   ")[0]
        for line in recipe.splitlines()
        if line.startswith("  specpilot ")
        for part in line.split("&&")
    ]
    # the job exports at its end: the recipe's job file asks for the format a trainer reads
    assert commands[0] == "specpilot job job.toml" and "specpilot report out/" in commands
    assert 'export = ["specforge"]' in recipe and "out/specforge.jsonl" in recipe
    for command in commands:  # each one is a real command
        assert shlex.split(command)[1] in COMMANDS, command
