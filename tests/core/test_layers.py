"""The packages form layers: no import cycle between them, function-local imports included,
and `engines` (the engine knowledge) imports nothing above it.

Reading the imports from the source (not from `sys.modules`) sees the imports inside
functions too, which is where cycles used to hide.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

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


#: the only places that may import an engine's own modules: the engines themselves, each
#: engine's planner, and the planner dispatch (engines/ cannot import plan/)
ENGINE_NAMED = ("engines/sglang/", "engines/vllm/", "plan/sglang/", "plan/vllm/")
MAY_IMPORT_ENGINE_NAMED = ("engines/", "plan/sglang/", "plan/vllm/", "plan/planners.py")


def _imported(node: ast.AST) -> list[str]:
    """The modules (and `module.name`s) an absolute import node names; [] for any other node."""
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []


def _engine_named_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        for name in _imported(node):
            as_path = name.replace(".", "/") + "/"
            if any(as_path.startswith(f"specpilot/{named}") for named in ENGINE_NAMED):
                found.add(name)
    return found


def test_only_engines_and_planners_import_an_engine_by_name() -> None:
    """Everything else reaches an engine through its adapter (`engines/registry.py`), so a
    third engine plugs in without touching check, launch, generate or the CLI."""
    offenders = {
        str(path.relative_to(SRC)): sorted(names)
        for path in SRC.rglob("*.py")
        if not str(path.relative_to(SRC)).startswith(MAY_IMPORT_ENGINE_NAMED)
        and (names := _engine_named_imports(path))
    }
    assert offenders == {}


def test_the_engine_import_finder_sees_both_import_forms(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from specpilot.engines.sglang import rules\nimport specpilot.plan.vllm.planner\n"
        "from specpilot.engines import registry\n"
    )
    assert _engine_named_imports(source) == {
        "specpilot.engines.sglang",
        "specpilot.engines.sglang.rules",
        "specpilot.plan.vllm.planner",
    }


def folder_graph(folder: Path) -> dict[str, set[str]]:
    """The import graph among one folder's own modules and subpackages (imports inside
    functions and under TYPE_CHECKING included): a package's `__init__` is not a unit."""
    package = "specpilot." + ".".join(folder.relative_to(SRC).parts) if folder != SRC else "specpilot"
    graph: dict[str, set[str]] = defaultdict(set)
    for path in folder.rglob("*.py"):
        parts = path.relative_to(folder).parts
        if parts == ("__init__.py",):
            continue
        unit = parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            for name in _imported(node):
                if name.startswith(f"{package}."):
                    target = name[len(package) + 1 :].split(".")[0]
                    if target != unit and _is_unit(folder, target):
                        graph[unit].add(target)
    return graph


def _is_unit(folder: Path, name: str) -> bool:
    return (folder / name / "__init__.py").is_file() or (folder / f"{name}.py").is_file()


FOLDERS = sorted(str(p.parent.relative_to(SRC)) for p in SRC.rglob("__init__.py") if p.parent != SRC)


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_import_cycle_inside_a_folder(folder: str) -> None:
    cycle = _cycle(folder_graph(SRC / folder))
    assert cycle is None, " -> ".join(cycle or [])


#: generate/'s subpackages, bottom first: each imports only those before it
GENERATE_LAYERS = ("sampling", "rows", "yields", "ledger", "writers", "dispatch", "job", "verify")


def test_generate_subpackages_import_downwards() -> None:
    graph = folder_graph(SRC / "generate")
    for i, unit in enumerate(GENERATE_LAYERS):
        assert graph.get(unit, set()) <= set(GENERATE_LAYERS[:i]), unit


def test_the_folder_graph_sees_a_subpackage_import() -> None:
    assert folder_graph(SRC / "generate")["writers"] >= {"ledger", "rows"}
