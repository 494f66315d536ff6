"""No error is swallowed whole: `except Exception:` (or `except BaseException:`, or a bare
`except:`) whose body only passes or continues, and `suppress(Exception)`, are refused.

An expected error is caught by its own type, with a comment saying why; a bug surfaces.
The check reads the syntax tree, so a comment or a line break cannot hide a site.
"""

from __future__ import annotations

import ast
from pathlib import Path

import specpilot

SRC = Path(specpilot.__file__).parent
TOO_BROAD = {"Exception", "BaseException"}


def _names(node: ast.expr | None) -> set[str]:
    """The exception names an `except` clause or a `suppress(...)` call catches."""
    if node is None:
        return {"BaseException"}  # a bare `except:`
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(element) for element in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _does_nothing(body: list[ast.stmt]) -> bool:
    return all(isinstance(statement, ast.Pass | ast.Continue) for statement in body)


def swallowed(source: str) -> list[int]:
    """Line numbers of the sites that swallow every error."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler):
            if _names(node.type) & TOO_BROAD and _does_nothing(node.body):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
            if name == "suppress" and any(_names(arg) & TOO_BROAD for arg in node.args):
                lines.append(node.lineno)
    return sorted(lines)


def _embedded_sources(path: Path) -> list[str]:
    """Python scripts kept as string constants (shipped to a host and run there)."""
    scripts = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
            try:
                ast.parse(node.value)
            except SyntaxError:
                continue
            scripts.append(node.value)
    return scripts


def test_the_check_sees_each_form() -> None:
    caught = """
try:
    a()
except Exception:
    pass
for x in y:
    try:
        b()
    except (OSError, BaseException):  # a comment does not hide it
        continue
try:
    c()
except:
    pass
with contextlib.suppress(Exception):
    d()
with suppress(ValueError, Exception):
    e()
"""
    assert swallowed(caught) == [4, 9, 13, 15, 17]
    allowed = """
try:
    a()
except OSError:  # expected: said why
    pass
try:
    b()
except Exception as err:
    note(err)
try:
    c()
except BaseException:
    cleanup()
    raise
with contextlib.suppress(ProcessLookupError):
    d()
"""
    assert swallowed(allowed) == []


def test_src_swallows_no_error() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for source in [path.read_text(), *_embedded_sources(path)]:
            found += [f"{path.relative_to(SRC)}:{line}" for line in swallowed(source)]
    assert found == [], "catch the expected error by its type, and say why: " + ", ".join(found)
