"""The job's projected time while it runs (`generate`) and after (`report`).

From the job's own measured rates (`projection.job_rates`: output tokens per second per
server, output tokens per row so far) and, before its first row, from the job folder's
bench result. `generate` prints one `projected:` line at its progress interval; `report`
shows the whole input's and the remaining rows' GPU-hours and wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path

from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.ledger.report import JobSummary, summarize
from specpilot.projection import Projection, Rates, job_rates, project, read_bench
from specpilot.taskgroup import beside

Watcher = Callable[[Dispatcher], AbstractAsyncContextManager[object]]


def _fallback(job_dir: Path, rates: Rates | None) -> Rates | None:
    if rates is not None:
        return rates
    bench = read_bench(job_dir)
    return bench.rates if bench is not None else None


def _gpus(gpus: int | None, servers: int, rates: Rates) -> int:
    return gpus if gpus is not None else max(servers, 1) * rates.gpus_per_server


def report_projections(job_dir: Path, summary: JobSummary, gpus: int | None) -> dict[str, Projection]:
    """'whole input' and, while rows are left, 'rows left': each on `gpus` (default the
    job's own servers)."""
    running = summary.state == "incomplete" and summary.output_tokens_per_s > 0
    rate = summary.output_tokens_per_s if running else summary.output_tokens_per_s_overall or 0.0
    over = "over the last minute" if running else "over the whole job"
    servers = len(summary.servers)
    rates = _fallback(
        job_dir,
        job_rates(
            done_rows=summary.done,
            output_tokens=summary.completion_tokens,
            output_tokens_per_s=rate,
            servers=servers,
            over=over,
            job_dir=job_dir,
        ),
    )
    if rates is None:
        return {}
    found = {"whole input": project(summary.total, rates, _gpus(gpus, servers, rates))}
    left = summary.pending + summary.in_flight
    if left:
        found["rows left"] = project(left, rates, _gpus(gpus, servers, rates))
    return found


def projected_eta(summary: JobSummary, projections: dict[str, Projection]) -> JobSummary:
    """The summary with its eta from the rows-left projection where that plays the tail (a
    bench sample's output lengths are known): the rows left in waves on the job's own servers,
    the slow last rows included, so `report`'s eta and its projected line say one thing.
    Elsewhere the eta stays the rate window's, and says it has no tail."""
    left = projections.get("rows left")
    if left is None or left.tail_s is None or summary.eta_s is None:
        return summary
    return replace(summary, eta_s=round(left.wall_s, 1), eta_basis="rows left played in waves, tail included")


def projecting(job_dir: Path, interval_s: float, notify: Callable[[str], None]) -> Watcher:
    """A `JobWatcher` printing the projected time of the rows left every `interval_s`."""

    @contextlib.asynccontextmanager
    async def watch(dispatcher: Dispatcher) -> AsyncIterator[object]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                # the ledger's summary: the counters and rate window the progress line shows too
                s = summarize(dispatcher.ledger, running=True)
                servers = len(dispatcher.pool.servers)
                window = "minute" if s.rate_window_s >= 60 else f"{s.rate_window_s:.0f} s"
                measured = job_rates(
                    done_rows=s.done,
                    output_tokens=s.completion_tokens,
                    output_tokens_per_s=s.output_tokens_per_s,
                    servers=servers,
                    over=f"over the last {window}",
                    job_dir=job_dir,
                )
                rates = _fallback(job_dir, measured)
                if rates is None:
                    continue
                gpus = _gpus(None, servers, rates)
                left, whole = project(s.pending + s.in_flight, rates, gpus), project(s.total, rates, gpus)
                notify(
                    f"projected: rows left {left.line()}; the whole input {whole.gpu_hours:,.2f} GPU-hours"
                )

        async with beside(loop, "the projection's progress line"):
            yield None

    return watch


def all_of(watchers: Sequence[Watcher]) -> Watcher:
    """One `JobWatcher` entering each of `watchers` (the status page, the projection)."""

    @contextlib.asynccontextmanager
    async def watch(dispatcher: Dispatcher) -> AsyncIterator[object]:
        async with contextlib.AsyncExitStack() as stack:
            for watcher in watchers:
                await stack.enter_async_context(watcher(dispatcher))
            yield None

    return watch
