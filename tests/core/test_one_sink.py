"""One output sink: no command decides for itself what `--json` prints or where.

`cli/output.py` is the one place that reads the `--json` choice and writes JSON: a command
hands its result object to `Output.show` and its progress lines to `Output.step`/`note`.
A command that branches on `as_json` or dumps JSON itself drifts from the others (which
stream a step goes to, strict JSON or `NaN`, one object or two on stdout). So `as_json` may
only be handed to `Output(...)`, and no module of `cli/` but `output.py` calls a JSON
`dump`/`dumps`. The source is read with `ast`, so code no test reaches is checked too.
"""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "src" / "specpilot" / "cli"
#: the sink itself
SINK = "output.py"
#: modules whose `dump`/`dumps` write JSON
JSON_MODULES = {"json", "jsontext", "specpilot.jsontext"}


def _json_dump_names(tree: ast.Module) -> set[str]:
    """Local names of JSON dump functions: `from json import dumps as d` -> {"d"}."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in JSON_MODULES
        for alias in node.names
        if alias.name in ("dump", "dumps")
    }


def _handed_to_output(tree: ast.Module) -> set[int]:
    """ids of the `as_json` names that are arguments of an `Output(...)` call: allowed."""
    return {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Output"
        for arg in [*node.args, *(keyword.value for keyword in node.keywords)]
    }


def _deciding(path: Path) -> list[str]:
    """Where a module decides what --json prints: line and what it does."""
    tree = ast.parse(path.read_text(), str(path))
    dumps, handed = _json_dump_names(tree), _handed_to_output(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "as_json" and id(node) not in handed:
            found.append((node.lineno, "reads as_json (hand it to Output(...) instead)"))
        elif isinstance(node, ast.Attribute) and node.attr == "_json":
            found.append((node.lineno, "reads the sink's choice (give the result a to_json/human)"))
        elif isinstance(node, ast.Call):
            func = node.func
            attribute_dump = isinstance(func, ast.Attribute) and func.attr in ("dump", "dumps")
            if attribute_dump or (isinstance(func, ast.Name) and func.id in dumps):
                found.append((node.lineno, "writes JSON itself (Output.show writes a result's to_json)"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_no_command_decides_what_json_prints() -> None:
    modules = sorted(p for p in CLI.glob("*.py") if p.name != SINK)
    assert len(modules) > 10, "the cli folder moved: this test reads nothing"
    found = [f"cli/{path.name}:{where}" for path in modules for where in _deciding(path)]
    assert not found, "a command decides its --json output itself: " + "; ".join(found)


def test_the_check_sees_what_it_looks_for(tmp_path: Path) -> None:
    """Each form of deciding is found, and handing the flag to the sink is not (a check that
    finds nothing proves nothing)."""
    source = tmp_path / "sample.py"
    source.write_text(
        "import json\n"
        "from specpilot import jsontext\n"
        "from json import dumps as encode\n"
        "def a(as_json):\n    if as_json:\n        pass\n"
        "def b(as_json):\n    click.echo('x', err=as_json)\n"
        "def c(data):\n    click.echo(json.dumps(data))\n"
        "def d(data):\n    click.echo(jsontext.dumps(data, indent=2))\n"
        "def e(data):\n    print(encode(data))\n"
        "def f(out):\n    return out._json\n"
        "def g(as_json):\n    out = Output(as_json)\n    json.loads('{}')\n"
    )
    assert [line.split(":")[0] for line in _deciding(source)] == ["5", "8", "10", "12", "14", "16"]
