"""Every task of a generate job under one `asyncio.TaskGroup`: none can fail unseen.

Requests, flushes, probes and metrics polls are children of the group, so an exception
in any of them cancels the others and ends the job with it. Rows already committed stay
committed; rows in flight stay in flight in the ledger, and a rerun sends them again.
Each task carries a name, so the one line the user sees says what failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from specpilot.taskgroup import RAISED_AS_IS, TaskFailed

__all__ = ["JobTasks"]


class JobTasks:
    """The job's task group: `run(main)` returns once `main` and every task it spawned ended.

    When `main` returns, the tasks still running (the periodic loops, probes, requests
    left by a stop) are cancelled. `on_error(what)` is told of the first failure before
    any other task runs again, so the job starts no new work while the group unwinds.
    """

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._on_error = on_error
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: tuple[str, Exception] | None = None
        self.closing = False

    async def run(self, main: Coroutine[Any, Any, None], what: str) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                try:
                    await main
                except Exception as err:
                    self._failed(what, err)
                    raise
                finally:
                    self.closing = True
                    for task in self._tasks:
                        task.cancel()
        except BaseExceptionGroup:
            if self._failure is None:
                raise
        if self._failure is not None:
            failed_task, error = self._failure
            if isinstance(error, RAISED_AS_IS):
                raise error
            raise TaskFailed(failed_task, error) from error

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def spawn(self, work: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None] | None:
        """Start `work` in the group; None (and `work` dropped) once the job is ending."""
        if self._group is None or self.closing:
            work.close()
            return None
        task = self._group.create_task(work)
        self._tasks.add(task)

        def ended(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and isinstance(err := task.exception(), Exception):
                self._failed(what, err)

        task.add_done_callback(ended)
        return task

    def _failed(self, what: str, err: Exception) -> None:
        if self._failure is None:
            self._failure = (what, err)
            self.closing = True
            self._on_error(what)
