"""The memory-fraction step and floor have one home (`plan/fraction.py`) that the SGLang
planner and the bench both read: a copy elsewhere drifts (the bench's once repeated them)."""

from __future__ import annotations

import ast
from pathlib import Path

import specpilot

SRC = Path(specpilot.__file__).parent
HOME = "plan/fraction.py"
NAMES = {"FRACTION_STEP", "LOWEST_FRACTION"}
#: the modules that step a memory fraction down
READERS = ("plan/sglang/planner.py", "bench/variants.py")


def _assigned(tree: ast.Module) -> set[str]:
    targets: list[ast.expr] = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets += node.targets
        elif isinstance(node, ast.AnnAssign):
            targets.append(node.target)
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _imported_from_home(tree: ast.Module) -> set[str]:
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "specpilot.plan.fraction"
        for alias in node.names
    }


def test_only_the_home_defines_the_fraction_step_and_floor() -> None:
    defining = {
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if _assigned(ast.parse(path.read_text())) & NAMES
    }
    assert defining == {HOME}


def test_the_planner_and_the_bench_read_them_from_the_home() -> None:
    for reader in READERS:
        assert _imported_from_home(ast.parse((SRC / reader).read_text())) == NAMES, reader


def test_the_finder_sees_a_copy() -> None:
    copy = ast.parse("FRACTION_STEP = 0.01\nLOWEST_FRACTION: float = 0.5\nOTHER = 1\n")
    assert _assigned(copy) == {*NAMES, "OTHER"}
