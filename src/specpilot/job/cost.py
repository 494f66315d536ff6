"""The whole job's cost: projected at start (from the bench when there is one), GPU-hours
used per stage at the end (each stage's wall time x the GPUs the job held meanwhile; an
attempt a kill ended counts up to its last heartbeat)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.job import JobWatcher
from specpilot.job.record import JobRecord
from specpilot.job.schema import STAGES
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


#: how the GPU-hours of rows that never reach the dataset are counted
ROWS_PRO_RATA = (
    "by output tokens: the generate stage's GPU-hours, less restarts and stalls, times the share of "
    "its output tokens in rows left out of the exports (flagged rows; failed rows record no tokens)"
)


@dataclass(frozen=True)
class Waste:
    """The job's GPU-hours that bought nothing, by part, over all its GPU-hours."""

    total_gpu_hours: float
    rows_left_out: float
    failed_starts: float
    restarts: float
    stalls: float

    @property
    def wasted_gpu_hours(self) -> float:
        return self.rows_left_out + self.failed_starts + self.restarts + self.stalls

    @property
    def share(self) -> float:
        return self.wasted_gpu_hours / self.total_gpu_hours if self.total_gpu_hours > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "share": round(self.share, 4),
            "total_gpu_hours": round(self.total_gpu_hours, 6),
            "wasted_gpu_hours": round(self.wasted_gpu_hours, 6),
            "parts": {
                "rows_left_out": round(self.rows_left_out, 6),
                "failed_starts": round(self.failed_starts, 6),
                "restarts": round(self.restarts, 6),
                "stalls": round(self.stalls, 6),
            },
            "rows_pro_rata": ROWS_PRO_RATA,
            "failed_starts_are": "GPU-hours of `up` attempts that failed",
            "restarts_are": "from each dead engine seen to its restart ready, on the job's GPUs",
            "stalls_are": "generate's time with every server down, beyond the restarts",
        }


def waste(record: JobRecord, include_flagged: bool) -> Waste:
    """The job's wasted GPU-hours from its record (see `Waste.to_json` for each part)."""
    generate = record.stage("generate")
    evidence = generate.get("evidence") or {}
    gpus = int(generate.get("gpus", 0))
    restart_s = sum(float(r.get("down_s", 0.0)) for r in record.data.get("restarts", []))
    restarts_h = restart_s * gpus / 3600
    stalls_h = max(0.0, float(generate.get("stalled_s", 0.0)) - restart_s) * gpus / 3600
    working_h = max(0.0, float(generate.get("gpu_hours", 0.0)) - restarts_h - stalls_h)
    tokens = int(evidence.get("completion_tokens") or 0)
    left_out = 0 if include_flagged else int(evidence.get("flagged_completion_tokens") or 0)
    return Waste(
        total_gpu_hours=sum(record.gpu_hours().values()),
        rows_left_out=working_h * left_out / tokens if tokens else 0.0,
        failed_starts=float(record.stage("up").get("failed_gpu_hours", 0.0)),
        restarts=restarts_h,
        stalls=stalls_h,
    )


def record_waste(record: JobRecord, include_flagged: bool) -> Waste:
    """`waste` written to job.json: its share at the top (the measure the job is judged on)."""
    found = waste(record, include_flagged)
    record.data["gpu_hours_wasted"] = found.to_json()
    record.data["gpu_hours_wasted_share"] = round(found.share, 4)
    record.save()
    return found


def yield_lines(record: JobRecord) -> list[str]:
    """The job's end summary: what the dataset holds (clean, flagged by cause, failed, each
    export's rows) and the share of its GPU-hours wasted."""
    lines = []
    found = record.data.get("yield")
    if found:
        causes = ", ".join(f"{n:,} {name}" for name, n in (found.get("by_cause") or {}).items() if n)
        share = found.get("clean_share")
        lines.append(
            f"rows: {found['clean']:,} clean"
            + (f" ({share:.1%})" if share is not None else "")
            + f", {found['flagged']:,} flagged{f' ({causes})' if causes else ''}, {found['failed']:,} failed"
            + f" of {found['rows_total']:,}"
        )
        exports = found.get("exports")
        if exports is not None:
            lines.append("exports: " + (", ".join(f"{f} {n:,} rows" for f, n in exports.items()) or "none"))
    wasted = record.data.get("gpu_hours_wasted")
    if wasted:
        parts = wasted["parts"]
        lines.append(
            f"GPU-hours wasted: {wasted['share']:.1%} ({wasted['wasted_gpu_hours']:.3f} of "
            f"{wasted['total_gpu_hours']:.3f}): rows not exported {parts['rows_left_out']:.3f}, "
            f"failed starts {parts['failed_starts']:.3f}, restarts {parts['restarts']:.3f}, "
            f"stalls {parts['stalls']:.3f}"
        )
    return lines
