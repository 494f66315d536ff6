"""The whole job's time before and while it runs: GPU-hours and wall time on N GPUs.

A projection is arithmetic on measured rates, never a guess: output tokens the job will
write (rows x mean output tokens per row, as measured) over the output tokens per second
one server sustains (a bench's steady state, or the job's own rate so far). One server
holds `gpus_per_server` GPUs (the spec's `[gpu] count`); N GPUs run N // that servers
side by side, so wall time divides and GPU-hours do not. `rests_on` says what it used.

`bench` writes its result as `bench.json` in the job folder (the `--output` of the
`generate` that follows); `plan --job`, `generate` and `report` read it from there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.errors import UserError

BENCH_FILE = "bench.json"
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Rates:
    """What a projection rests on: one server's sustained rate and the rows' mean length."""

    output_tokens_per_s: float
    mean_output_tokens: float
    gpus_per_server: int
    source: str


@dataclass(frozen=True)
class Projection:
    rows: int
    gpus: int
    servers: int
    gpu_hours: float
    wall_s: float
    rests_on: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "gpus": self.gpus,
            "servers": self.servers,
            "gpu_hours": round(self.gpu_hours, 2),
            "wall_s": round(self.wall_s, 1),
            "rests_on": self.rests_on,
        }

    def line(self) -> str:
        hours = f"{self.gpu_hours:,.1f}" if self.gpu_hours >= 10 else f"{self.gpu_hours:.2f}"
        return (
            f"{self.rows:,} rows on {self.gpus} GPU{'s' if self.gpus != 1 else ''}: "
            f"{hours} GPU-hours, {wall_text(self.wall_s)} wall ({self.rests_on})"
        )


def wall_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes = round(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"


def project(rows: int, rates: Rates, gpus: int | None = None) -> Projection:
    """The time for `rows` more rows on `gpus` GPUs (default: one server's)."""
    gpus = rates.gpus_per_server if gpus is None else gpus
    if gpus < rates.gpus_per_server:
        raise UserError(
            f"{gpus} GPUs cannot hold one server of {rates.gpus_per_server} GPUs",
            field="--gpus",
            fix=f"pass --gpus {rates.gpus_per_server} or more (a multiple of the spec's [gpu] count)",
        )
    servers = gpus // rates.gpus_per_server
    server_s = (
        rows * rates.mean_output_tokens / rates.output_tokens_per_s if rates.output_tokens_per_s else 0.0
    )
    return Projection(
        rows=rows,
        gpus=servers * rates.gpus_per_server,
        servers=servers,
        gpu_hours=server_s * rates.gpus_per_server / SECONDS_PER_HOUR,
        wall_s=server_s / servers,
        rests_on=rates.source,
    )


@dataclass(frozen=True)
class BenchOutcome:
    """The part of a bench result a projection needs: the winner's rates, the input's size."""

    winner: str
    input_rows: int
    rates: Rates
    #: label -> that variant's rates, for every variant measured
    measured: dict[str, Rates]


def _rates(variant: dict[str, Any], mean: float, gpus_per_server: int, sample_rows: int, when: str) -> Rates:
    """One variant's rate; the output length is the mean over every variant's rows (speculative
    decoding does not change what the model writes)."""
    return Rates(
        output_tokens_per_s=float(variant["output_tokens_per_s"]),
        mean_output_tokens=mean,
        gpus_per_server=gpus_per_server,
        source=(
            f"bench {when}, variant {variant['label']}: {variant['output_tokens_per_s']:,.0f} out tok/s "
            f"steady over {variant['steady_s']:.0f} s, {mean:,.0f} output tokens per row over "
            f"{sample_rows} sampled rows"
        ),
    )


def read_bench(job_dir: Path) -> BenchOutcome | None:
    """The bench result in a job folder, None when there is none; a damaged one names its fix."""
    path = job_dir / BENCH_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        gpus = int(data["gpus_per_server"])
        rows = int(data["sample"]["rows"])
        when = str(data["finished_at"])
        winner = data["winner"]
        if winner is None:
            return None
        mean = float(data["mean_output_tokens"])
        measured = {
            v["label"]: _rates(v, mean, gpus, rows, when)
            for v in data["variants"]
            if v.get("output_tokens_per_s")
        }
        return BenchOutcome(
            winner=winner,
            input_rows=int(data["input_rows"]),
            rates=measured[winner],
            measured=measured,
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(
            f"{path} cannot be read as a bench result ({type(err).__name__}: {err})",
            field=str(path),
            fix="run `specpilot bench` again for this job, or delete the file",
        ) from None


def job_rates(
    *, done_rows: int, output_tokens: int, output_tokens_per_s: float, servers: int, over: str, job_dir: Path
) -> Rates | None:
    """The rates a running job shows, per server; None before its first row. A server's GPU
    count comes from the job's bench result (else one GPU per server, and it says so)."""
    if done_rows <= 0 or output_tokens_per_s <= 0:
        return None
    bench = read_bench(job_dir)
    gpus = bench.rates.gpus_per_server if bench is not None else 1
    assumed = "" if bench is not None else "; 1 GPU per server assumed (no bench.json)"
    servers = max(servers, 1)
    mean = output_tokens / done_rows
    return Rates(
        output_tokens_per_s=output_tokens_per_s / servers,
        mean_output_tokens=mean,
        gpus_per_server=gpus,
        source=(
            f"this job: {output_tokens_per_s:,.0f} out tok/s {over} on {servers} server"
            f"{'s' if servers != 1 else ''}, {mean:,.0f} output tokens per row over "
            f"{done_rows:,} rows{assumed}"
        ),
    )
