"""The README holds: its commands run from the repository root as written, and print what it shows.

Every `$ specpilot plan|check ...` line in a fenced block of README.md runs here (from the
repository root, no GPU, no SSH host) and each line of output the README shows under it
must appear in the real output (whitespace-normalized, so terminal wrapping does not
matter), as must the exit code it states. Commands that need a started engine or a
GPU host (`up`, `status`, `generate --run`, ...) are checked for their paths only.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specpilot.generate.rows.inputs import ROW_SHAPES

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
#: subcommands that need nothing but the repository (no engine, no host, no earlier step)
RUNNABLE = ("plan", "check")
#: paths the README's commands name that earlier steps create (the demo, a generate job)
MADE_BY_EARLIER_STEPS = ("specpilot-demo/", "out/")
COMMAND_TIMEOUT_S = 120
BORDER = re.compile(r"^[\s┏┡└┃━┳╇┴┬─┼┓┩┘╭╮╰╯]*$")


@dataclass
class ShownCommand:
    argv: list[str]
    output: list[str] = field(default_factory=list)
    exit_code: int | None = None


def fenced_blocks(text: str) -> list[list[str]]:
    blocks, current, inside = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            if inside:
                blocks.append(current)
            current, inside = [], not inside
        elif inside:
            current.append(line)
    return blocks


def shown_commands(block: list[str]) -> list[ShownCommand]:
    """`$ ...` lines (with `\\` continuations), each with the output lines under it."""
    found: list[ShownCommand] = []
    lines = iter(block)
    for line in lines:
        if line.startswith("$ "):
            text = line[2:]
            while text.endswith("\\"):
                text = text[:-1] + " " + next(lines).strip()
            found.append(ShownCommand(shlex.split(text)))
        elif found and (match := re.fullmatch(r"\(exit (\d)\)", line.strip())):
            found[-1].exit_code = int(match.group(1))
        elif found:
            found[-1].output.append(line)
    return found


def all_commands() -> list[ShownCommand]:
    return [command for block in fenced_blocks(README) for command in shown_commands(block)]


def runnable() -> list[ShownCommand]:
    return [c for c in all_commands() if c.argv[:1] == ["specpilot"] and c.argv[1:2][0] in RUNNABLE]


def _normal(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("shown", runnable(), ids=lambda c: " ".join(c.argv[1:4]))
def test_readme_command_prints_what_the_readme_shows(shown: ShownCommand) -> None:
    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", *shown.argv],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT_S, check=False,
    )  # fmt: skip
    actual = _normal(done.stdout + done.stderr)
    if shown.exit_code is not None:
        assert done.returncode == shown.exit_code, done.stdout + done.stderr
    missing = [line for line in shown.output if not BORDER.match(line) and _normal(line) not in actual]
    assert missing == [], f"README lines not in the output of {shown.argv}:\n{done.stdout}{done.stderr}"


def test_there_are_runnable_commands_with_their_exit_codes() -> None:
    commands = runnable()
    assert {c.argv[1] for c in commands} == set(RUNNABLE)
    assert all(c.exit_code is not None and c.output for c in commands)


def _path_tokens(argv: list[str]) -> list[str]:
    return [t for t in argv if "/" in t and not t.startswith(("http", "-")) and not t.startswith("~")]


def test_every_path_in_a_readme_command_exists_from_the_root() -> None:
    """Fenced `$ specpilot` lines and bash blocks alike: a path either ships in the repository
    or is what an earlier README step makes (the demo's folder, a generate output)."""
    argvs = [c.argv for c in all_commands()]
    for block in fenced_blocks(README):
        text = "\n".join(line for line in block if not line.lstrip().startswith("#")).replace("\\\n", " ")
        for line in text.splitlines():
            if line.startswith(("specpilot ", "bash ", "pip ", "python ")):
                argvs.append(shlex.split(line.split("  #")[0]))
    paths = {t for argv in argvs for t in _path_tokens(argv)}
    assert paths, "no paths found: the parser is broken"
    missing = [
        p for p in sorted(paths) if not (ROOT / p).exists() and not p.startswith(MADE_BY_EARLIER_STEPS)
    ]
    assert missing == []


def test_readme_shows_each_prompt_row_shape_of_generate_help() -> None:
    for label, row in ROW_SHAPES.items():
        assert f"- {label}: `{json.dumps(row)}`" in README, label


def test_readme_names_nothing_outside_the_repository() -> None:
    assert "shared/" not in README and "steering" not in README
    assert not re.search(r"\bissue \d", README)
    for link in re.findall(r"\]\(([^)#]+)", README):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link


def test_rule_counts_in_the_readme_match_the_rule_tables() -> None:
    from collections import Counter

    from specpilot.engines.rules import Rule
    from specpilot.engines.sglang.rules import RULES as SGLANG_RULES
    from specpilot.engines.vllm.rules import RULES as VLLM_RULES

    def shown(rules: tuple[Rule, ...]) -> str:
        counts = Counter(rule.severity for rule in rules)
        return f"{len(rules)} ({counts['error']} errors, {counts['warning']} warning, {counts['adjusts']} adjusts)"

    assert f"| `check` rules | {shown(SGLANG_RULES)} | {shown(VLLM_RULES)} |" in README


def test_json_claim_matches_the_commands() -> None:
    """The README says which commands lack --json; every other command has it."""
    from click.testing import CliRunner

    from specpilot.cli import cli
    from specpilot.cli.commands import COMMANDS

    without = {"logs", "completion", "view"}
    assert "Every command but `logs` (it prints" in README and "`completion` (it prints" in README
    assert "and `view` (it serves a page" in README
    for name in COMMANDS:
        has_json = "--json" in CliRunner().invoke(cli, [name, "--help"]).output
        assert has_json == (name not in without), name
