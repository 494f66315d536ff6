"""Concurrent work whose failures surface: every task is awaited, every error is raised.

A task's failure is raised as it is when specpilot raised it on purpose (a
`SpecpilotError`, one line with its fix) or when it is the disk's or the ledger's; any
other exception is a bug and becomes `TaskFailed`, which names the task, so the one
line the user sees says what failed (the CLI's `--debug` shows the traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

from specpilot.errors import SpecpilotError

T = TypeVar("T")

#: raised as they are: errors specpilot raises on purpose, and the disk's or the ledger's
RAISED_AS_IS = (SpecpilotError, OSError, sqlite3.Error)

#: a coroutine and what it does ("starting member qwen-0"), for the error line
Work = tuple[Coroutine[Any, Any, T], str]


class TaskFailed(SpecpilotError):
    """A task raised an exception specpilot does not expect: a bug."""

    def __init__(self, what: str, err: BaseException) -> None:
        self.what = what
        super().__init__(
            f"{what} failed: {type(err).__name__}: {err} "
            "(specpilot bug, rerun with --debug for the traceback)"
        )


class SeveralFailed(SpecpilotError):
    """More than one work of `each_of` failed: one line naming every failure."""

    def __init__(self, failures: Sequence[tuple[str, BaseException]]) -> None:
        self.failures = [err for _, err in failures]
        # the gravest: bad input (2) when one of them is; a bug or a failure is 1
        self.exit_code = max(getattr(err, "exit_code", SpecpilotError.exit_code) for err in self.failures)
        shown = "; ".join(
            str(err) if isinstance(err, TaskFailed) else f"{what}: {err}" for what, err in failures
        )
        super().__init__(f"{len(failures)} failed: {shown}")


@contextlib.contextmanager
def naming(what: str) -> Iterator[None]:
    """An error of the body as it should surface: as it is, or a bug as `TaskFailed(what)`."""
    try:
        yield
    except Exception as err:
        if isinstance(err, RAISED_AS_IS):
            raise
        raise TaskFailed(what, err) from err


async def _named(work: Work[T]) -> T:
    coroutine, what = work
    with naming(what):
        return await coroutine


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first failure of a task group (groups nest when task groups do)."""
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first


async def all_of(works: Sequence[Work[T]]) -> list[T]:
    """Run every work at once; their results, in order. The first to fail cancels the
    others (each ends before this returns) and is raised."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_named(work)) for work in works]
    except BaseExceptionGroup as failures:
        # the group (every failure) stays in the --debug traceback, as its context
        raise _first(failures)  # noqa: B904
    return [task.result() for task in tasks]


async def each_of(works: Sequence[Work[T]]) -> list[T]:
    """Run every work to its end, even when some fail (cleanup: one stop failing must not
    leave the others running); their results, in order. One failure is raised as it is;
    several as `SeveralFailed`, which names each (a fleet's `down` reports every member
    that did not stop)."""
    results = await asyncio.gather(*(_named(work) for work in works), return_exceptions=True)
    failures = [
        (what, result)
        for (_, what), result in zip(works, results, strict=True)
        if isinstance(result, BaseException)
    ]
    if failures:
        _raise_failures(failures)
    return [result for result in results if not isinstance(result, BaseException)]


def _raise_failures(failures: list[tuple[str, BaseException]]) -> NoReturn:
    """One failure as it is; a cancellation or Ctrl-C as it is; else all of them, named."""
    if len(failures) == 1:
        raise failures[0][1]
    interrupt = next((err for _, err in failures if not isinstance(err, Exception)), None)
    if interrupt is not None:
        raise interrupt
    raise SeveralFailed(failures)


@contextlib.asynccontextmanager
async def beside(work: Callable[[], Coroutine[Any, Any, None]], what: str) -> AsyncIterator[None]:
    """Run `work` while the body runs, and cancel it when the body ends. If `work` fails
    first, the body is cancelled and the failure is raised; the body's own error is raised
    as it is. `work` is called inside the task: a body that ends before the task's first
    step leaves no coroutine unawaited."""

    async def run() -> None:
        with naming(what):
            await work()

    try:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(run())
            try:
                yield
            finally:
                task.cancel()
    except BaseExceptionGroup as failures:
        raise _first(failures)  # noqa: B904
