"""One event loop per command: library code never starts a loop of its own, and never starts
a task by hand outside `specpilot.taskgroup`.

A second `asyncio.run` inside a running loop is an error ("cannot be called from a running
event loop"); one in a synchronous helper that an async caller reaches is that error waiting
to happen (it was: fleet repair of a member whose model is on its SSH host). Only the command
layer (`cli/`, `__main__.py`) runs a loop. A task started with `asyncio.create_task` and
cancelled by hand can fail unseen or outlive its caller; `taskgroup` (`all_of`, `each_of`,
`beside`) or a job's `asyncio.TaskGroup` own every task instead. The source is read with
`ast`, so a call inside a function that no test reaches is found too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "specpilot"
#: the command layer: where a command's one event loop is run
COMMAND_LAYER = ("cli", "__main__.py")
#: asyncio functions that start (or run) an event loop
LOOP_STARTERS = {"run", "Runner", "new_event_loop"}
#: loop methods that run it
LOOP_RUNNERS = {"run_until_complete", "run_forever"}
#: asyncio functions that start a task nobody owns
TASK_STARTERS = {"create_task", "ensure_future"}
#: the one module that starts tasks: each one in a task group it awaits
TASK_MODULE = "taskgroup.py"
#: (file, function) -> why a task started by hand is right there (each awaited or cancelled on
#: every path out, which a task group cannot express here)
TASKS_ALLOWED: dict[tuple[str, str], str] = {
    ("launch/watch.py", "_stop_soon"): "the stop starts at the fatal line, overlapping the "
    "collection of the error's last lines, and outlives `watch`: the supervisor awaits it in "
    "its `finally`, after `watch` returned the failure",
    ("launch/watch.py", "start_following"): "the log is followed from before the spawn; "
    "`_finish_log` stops it early, once the process exited, to read the rest whole, and the "
    "supervisor's `finally` stops it on every other path",
    ("launch/watch.py", "_decide"): "the exit status is read while the last lines arrive; the "
    "outcome awaits it (`_render`) or `_decide`'s `finally` cancels it",
    ("hosts/local.py", "_agent_answer"): "the host agent's answer is shielded from a cancelled "
    "caller (an interrupt) and awaited on both paths: a spawn the agent began ends whole and is "
    "reaped inside the loop",
}


def _library_files() -> list[Path]:
    return sorted(path for path in SRC.rglob("*.py") if path.relative_to(SRC).parts[0] not in COMMAND_LAYER)


def _asyncio_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> asyncio function, for `from asyncio import run as go`."""
    return {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "asyncio"
        for alias in node.names
    }


def _is_loop(node: ast.expr) -> bool:
    """An expression that is an event loop: `asyncio.get_event_loop()`, `loop`, `self.loop`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("get_event_loop", "get_running_loop", "new_event_loop")
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "loop" in name.lower()


def _asyncio_call(func: ast.expr, imported: dict[str, str]) -> str | None:
    """The asyncio function or loop method a call's target is, else None."""
    if isinstance(func, ast.Name):
        return imported.get(func.id)
    if not isinstance(func, ast.Attribute):
        return None
    if isinstance(func.value, ast.Name) and func.value.id == "asyncio":
        return func.attr
    return func.attr if func.attr in LOOP_RUNNERS | TASK_STARTERS and _is_loop(func.value) else None


def _calls(path: Path) -> Iterator[tuple[ast.Call, str, str]]:
    """Each asyncio call of the file: (node, the asyncio function or loop method, the function it is in)."""
    tree = ast.parse(path.read_text(), str(path))
    imported = _asyncio_names(tree)

    def visit(node: ast.AST, within: str) -> Iterator[tuple[ast.Call, str, str]]:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else within
            if isinstance(child, ast.Call) and (name := _asyncio_call(child.func, imported)):
                yield child, name, within
            yield from visit(child, inner)

    yield from visit(tree, "<module>")


def _where(path: Path, node: ast.Call) -> str:
    return f"{path.relative_to(SRC.parent)}:{node.lineno}"


def test_library_code_runs_no_event_loop_of_its_own() -> None:
    found = [
        f"{_where(path, node)}: {name}"
        for path in _library_files()
        for node, name, _ in _calls(path)
        if name in LOOP_STARTERS | LOOP_RUNNERS
    ]
    assert not found, (
        "library code starts an event loop (make the caller async; only cli/ runs the loop): "
        + ", ".join(found)
    )


def test_library_code_starts_no_task_by_hand() -> None:
    found = [
        f"{_where(path, node)}: {name} in {within}()"
        for path in _library_files()
        if path.name != TASK_MODULE or path.parent != SRC
        for node, name, within in _calls(path)
        if name in TASK_STARTERS and (str(path.relative_to(SRC)), within) not in TASKS_ALLOWED
    ]
    assert not found, (
        "a task started by hand (use specpilot.taskgroup: all_of, each_of, beside; or allow it in "
        "TASKS_ALLOWED with the reason): " + ", ".join(found)
    )


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """Each form a loop or a task is started in is found (a check that finds nothing proves nothing)."""
    source = tmp_path / "sample.py"
    source.write_text(
        "import asyncio\n"
        "from asyncio import run as go, ensure_future\n"
        "def a():\n    asyncio.run(x())\n"
        "def b():\n    go(x())\n"
        "def c():\n    asyncio.get_event_loop().run_until_complete(x())\n"
        "def d(loop):\n    loop.run_forever()\n"
        "async def e():\n    asyncio.create_task(x())\n"
        "async def f():\n    ensure_future(x())\n"
        "async def g(self):\n    self.loop.create_task(x())\n"
        "async def h(group):\n    group.create_task(x())\n"  # a TaskGroup's: owned
    )
    watched = LOOP_STARTERS | LOOP_RUNNERS | TASK_STARTERS
    found = [(node.lineno, name, within) for node, name, within in _calls(source) if name in watched]
    assert found == [
        (4, "run", "a"),
        (6, "run", "b"),
        (8, "run_until_complete", "c"),
        (10, "run_forever", "d"),
        (12, "create_task", "e"),
        (14, "ensure_future", "f"),
        (16, "create_task", "g"),
    ]
