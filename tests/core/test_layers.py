"""The packages form layers: no import cycle between them, function-local imports included,
and `engines` (the engine knowledge) imports nothing above it.

Reading the imports from the source (not from `sys.modules`) sees the imports inside
functions too, which is where cycles used to hide.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import specpilot

SRC = Path(specpilot.__file__).parent
#: what engines/ may import: the shared leaves
ENGINE_LAYER_MAY_IMPORT = {"engines", "errors", "secrets"}


def _unit(path: Path) -> str:
    """The package (`check`) or top-level module (`spec`) a file belongs to."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _imported_units(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = (
                [node.module] if node.module != "specpilot" else [f"specpilot.{a.name}" for a in node.names]
            )
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {_unit_named(name.split(".")[1]) for name in names if name.startswith("specpilot.")}
    return found


def _unit_named(name: str) -> str:
    """`specpilot.X`: a package or module X, else a name the package itself defines."""
    return name if (SRC / name).is_dir() or (SRC / f"{name}.py").is_file() else "__init__"


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in SRC.rglob("*.py"):
        unit = _unit(path)
        graph[unit] |= _imported_units(path) - {unit}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the path around it; None when the graph is acyclic."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(unit: str) -> list[str] | None:
        state[unit] = "open"
        stack.append(unit)
        for target in sorted(graph.get(unit, ())):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[unit] = "done"
        stack.pop()
        return None

    for unit in sorted(graph):
        if unit not in state and (found := visit(unit)):
            return found
    return None


def test_packages_import_each_other_without_cycles() -> None:
    cycle = _cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_engines_is_the_bottom_layer() -> None:
    assert import_graph()["engines"] <= ENGINE_LAYER_MAY_IMPORT


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
