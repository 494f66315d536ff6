"""The healer runs beside generate (`taskgroup.beside`): its failure ends the job at once and
is raised; at the job's end a restart it is in the middle of is finished before it is cancelled."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from specpilot.errors import UserError
from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.job.heal import _task_watcher

NO_DISPATCHER = cast(Dispatcher, None)


def test_a_failing_healer_ends_the_job_at_once_with_its_error() -> None:
    refused = UserError("the run's state is gone", field="NAME")
    job_ended: list[str] = []

    async def work(dispatcher: Dispatcher) -> None:
        raise refused

    async def job() -> None:
        async with _task_watcher(work, asyncio.Lock())(NO_DISPATCHER):
            try:
                await asyncio.sleep(0.5)  # the job would go on without its healer
                job_ended.append("finished")
            except asyncio.CancelledError:
                job_ended.append("cancelled")
                raise

    with pytest.raises(UserError) as raised:
        asyncio.run(job())
    assert raised.value is refused and job_ended == ["cancelled"]


def test_the_end_of_the_job_waits_for_a_restart_in_progress() -> None:
    steps: list[str] = []

    async def work(dispatcher: Dispatcher) -> None:
        async with busy:
            steps.append("restart begun")
            await asyncio.sleep(0.2)
            steps.append("restart done")
        await asyncio.sleep(30)

    async def job() -> None:
        async with _task_watcher(work, busy)(NO_DISPATCHER):
            await asyncio.sleep(0.05)  # the job ends while the restart runs
        steps.append("job out")

    busy = asyncio.Lock()
    asyncio.run(job())
    assert steps == ["restart begun", "restart done", "job out"]
    assert not busy.locked()
