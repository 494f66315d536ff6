"""The whole job's cost: projected at start (from the bench when there is one), GPU-hours
used per stage at the end (each stage's wall time x the GPUs the job held meanwhile; an
attempt a kill ended counts up to its last heartbeat)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.job import JobWatcher
from specpilot.job.record import STAGES, JobRecord
from specpilot.job.spec import JobFile
from specpilot.projection import Projection, project, read_bench, wall_text
from specpilot.taskgroup import beside


def projection_at_start(job: JobFile, gpus: int) -> Projection | None:
    """The whole input on the job's GPUs at the bench winner's measured rate; None without a bench."""
    outcome = read_bench(job.output)
    if outcome is None:
        return None
    return project(outcome.input_rows, outcome.rates, max(gpus, outcome.rates.gpus_per_server))


def used_lines(record: JobRecord) -> list[str]:
    """One line per stage that ran, and the total: GPU-hours and wall time."""
    lines = []
    total_gpu_h, total_s = 0.0, 0.0
    for name in STAGES:
        stage = record.stage(name)
        if "wall_s" not in stage:
            continue
        gpu_h, wall_s = float(stage.get("gpu_hours", 0.0)), float(stage["wall_s"])
        total_gpu_h, total_s = total_gpu_h + gpu_h, total_s + wall_s
        lines.append(f"  {name:<9} {gpu_h:8.3f} GPU-hours  {wall_text(wall_s)}")
    lines.append(f"  {'total':<9} {total_gpu_h:8.3f} GPU-hours  {wall_text(total_s)}")
    return lines


def heartbeat(record: JobRecord, stage: str, every_s: float) -> JobWatcher:
    """A `JobWatcher` marking `stage` as still running every `every_s` (`JobRecord.heartbeat`)."""

    @contextlib.asynccontextmanager
    async def watch(dispatcher: Dispatcher) -> AsyncIterator[object]:
        async def beat() -> None:
            while True:
                await asyncio.sleep(every_s)
                record.heartbeat(stage)

        async with beside(beat, f"the {stage} stage's heartbeat"):
            yield None

    return watch
