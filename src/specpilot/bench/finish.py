"""What follows a bench's search, for `specpilot bench` and the job's bench stage alike: the
chart beside bench.json, the whole job projected from bench.json as `plan` and `report` read
it, the winner's spec written, and the exit the outcome calls for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.bench.render import render_svg
from specpilot.bench.run import SVG_FILE, BenchRequest, BenchResult, write_best
from specpilot.errors import EXIT_FAILED, UserError
from specpilot.projection import BENCH_FILE, Projection, project, read_bench


@dataclass(frozen=True)
class BenchFinish:
    result: BenchResult
    #: the whole input on the request's GPUs at the winner's measured rate (None: no winner)
    projection: Projection | None
    #: the result (bench.json) and its chart (bench.svg)
    bench_path: Path
    svg_path: Path
    #: where the winner's spec was written (None: no winner, or nowhere asked)
    best_path: Path | None

    def to_json(self) -> dict[str, Any]:
        return {**self.result.data, "projection": self.projection.to_json() if self.projection else None}

    def exit_code(self) -> int:
        """0 with a winner, EXIT_FAILED when every point started failed; a UserError when no
        point could be started (nothing was measured: the budget or the variants are the input
        to change)."""
        if not self.result.started:
            raise UserError(
                "no point could be started, so nothing was measured (the table says why for each)",
                field="--budget-s",
                fix="raise --budget-s, or pass --variants that check and plan accept",
            )
        return 0 if self.result.winner is not None else EXIT_FAILED


def finish_bench(result: BenchResult, request: BenchRequest, write_path: Path | None) -> BenchFinish:
    """The chart, the projection on `request.gpus`, and the winner's spec at `write_path` (never
    over an existing file) when there is a winner."""
    svg_path = request.job_dir / SVG_FILE
    svg_path.write_text(render_svg(result), encoding="utf-8")
    outcome = read_bench(request.job_dir)  # the projection reads bench.json as plan and report do
    projection = project(outcome.input_rows, outcome.rates, request.gpus) if outcome is not None else None
    best_path = None
    if write_path is not None and result.winner is not None:
        write_best(result, write_path)
        best_path = write_path
    return BenchFinish(result, projection, request.job_dir / BENCH_FILE, svg_path, best_path)
