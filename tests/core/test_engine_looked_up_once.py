"""Launch and status look an engine up by name in one place each: the command's entry point
resolves it once, and everything below takes the facts object it got (`EngineRelease`,
`Engine`) instead of looking the name up again.

`up` once looked the engine up five times on its way (twice for the argv, once for the
release table, twice for the log's classifier). The source is read with `ast`, so a lookup
in code no test reaches is found too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "specpilot"
#: the packages that take an engine's facts from their command's entry point
CHECKED = ("launch", "status")
#: the registry's lookups by name
LOOKUPS = {"engine_by_name", "engine_release"}
#: (file, function) -> which command resolves its engine there (each exactly once)
RESOLVING_PLACES: dict[tuple[str, str], str] = {
    ("launch/supervisor.py", "launch"): "`up` (and what starts runs: fleet, job, bench), from the spec",
    (
        "launch/serving.py",
        "serving_classifier",
    ): "a ready run's log (`status`, the job's healer), from its record",
}


def _lookup_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> registry lookup, for `from specpilot.engines.registry import engine_release as r`."""
    return {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("registry")
        for alias in node.names
        if alias.name in LOOKUPS
    }


def _lookups(path: Path) -> Iterator[tuple[int, str, str]]:
    """Each lookup by name in the file: (line, lookup, the function it is in)."""
    tree = ast.parse(path.read_text(), str(path))
    imported = _lookup_names(tree)

    def name_of(func: ast.expr) -> str | None:
        if isinstance(func, ast.Name):
            return imported.get(func.id)
        return func.attr if isinstance(func, ast.Attribute) and func.attr in LOOKUPS else None

    def visit(node: ast.AST, within: str) -> Iterator[tuple[int, str, str]]:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else within
            if isinstance(child, ast.Call) and (name := name_of(child.func)):
                yield child.lineno, name, within
            yield from visit(child, inner)

    yield from visit(tree, "<module>")


def _found() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for package in CHECKED:
        for path in sorted((SRC / package).rglob("*.py")):
            where = str(path.relative_to(SRC))
            for line, name, within in _lookups(path):
                found.setdefault((where, within), []).append(f"{where}:{line}: {name} in {within}()")
    return found


def test_launch_and_status_look_an_engine_up_only_where_a_command_resolves_it() -> None:
    found = _found()
    elsewhere = [call for place, calls in found.items() if place not in RESOLVING_PLACES for call in calls]
    assert not elsewhere, (
        "an engine looked up by name below a command's entry point (take the Engine or EngineRelease "
        "it resolved as a parameter): " + ", ".join(elsewhere)
    )
    assert {place: len(calls) for place, calls in found.items()} == dict.fromkeys(RESOLVING_PLACES, 1)


def test_the_check_sees_each_form_of_a_lookup(tmp_path: Path) -> None:
    """A check that finds nothing proves nothing: each spelling of a lookup is found."""
    source = tmp_path / "sample.py"
    source.write_text(
        "from specpilot.engines import registry\n"
        "from specpilot.engines.registry import engine_by_name, engine_release as release_of\n"
        "def a(spec):\n    return engine_by_name(spec.engine.name)\n"
        "def b(spec):\n    return release_of(spec.engine.name, spec.engine.version)\n"
        "async def c(state):\n    def inner():\n        return registry.engine_by_name(state.engine)\n"
        "def d(engine):\n    return engine.signatures\n"
    )
    assert list(_lookups(source)) == [
        (4, "engine_by_name", "a"),
        (6, "engine_release", "b"),
        (9, "engine_by_name", "inner"),
    ]
