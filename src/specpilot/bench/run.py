"""The whole bench: sample, every variant in turn, the winner, the files it leaves.

Files, all under the job folder (`--job`, the `--output` the real `generate` will use):
`bench.json` (the result `plan`, `generate` and `report` project from), `bench.svg`, and
`bench/` (the sample, and per variant the scratch ledgers of its warm-up and sample).
The winner is the variant whose projected time for the whole input is shortest. Speculative
decoding does not change what the model writes, so every projection uses one mean output
length (over all measured rows) and the variants differ only in the rate they sustain.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot import __version__, jsontext
from specpilot.bench.measure import Measured, Notify, Settings, measure
from specpilot.bench.sample import draw, open_prompts, write_prompts
from specpilot.bench.variants import Variant, prepare, spec_method
from specpilot.errors import JobFailed, UserError
from specpilot.generate.sampling import SamplingOptions
from specpilot.hosts import open_host_section
from specpilot.launch.shield import received, stop_started, take_over_signals
from specpilot.launch.state import specpilot_home
from specpilot.projection import BENCH_FILE
from specpilot.spec import Spec, spec_to_toml

SCRATCH_DIR = "bench"
SVG_FILE = "bench.svg"
REACH_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class BenchRequest:
    spec: Spec
    prompts: Path
    job_dir: Path
    variants: list[Variant]
    sample_size: int
    seed: int
    settings: Settings


@dataclass
class BenchResult:
    spec: Spec
    variants: list[Measured]
    specs: dict[str, Spec]
    winner: str | None
    input_rows: int
    sample_rows: int
    mean_output_tokens: float | None
    data: dict[str, Any]


def plan_settings(
    job_dir: Path,
    *,
    sample_rows: int,
    sampling: SamplingOptions,
    budget_s: float,
    warmup_s: float,
    progress_interval_s: float,
) -> Settings:
    scratch = job_dir / SCRATCH_DIR
    return Settings(
        sample_path=scratch / "sample.jsonl",
        warmup_path=scratch / "warmup.jsonl",
        sample_rows=sample_rows,
        sampling=sampling,
        budget_s=budget_s,
        warmup_s=warmup_s,
        progress_interval_s=progress_interval_s,
        request_timeout_s=budget_s,
    )


def check_budget(budget_s: float, warmup_s: float) -> None:
    if budget_s <= warmup_s:
        raise UserError(
            f"{budget_s:g} s leaves nothing after the {warmup_s:g} s warm-up (and the engine's start)",
            field="--budget-s",
            fix=f"pass --budget-s well above --warmup-s {warmup_s:g} (a real GPU start alone takes minutes), "
            "or lower --warmup-s",
        )


def reach_host(spec: Spec) -> None:
    """Connect to the spec's host once, so an unreachable one is refused before any work."""

    async def reach() -> None:
        host = open_host_section(spec.host)
        try:
            await host.run(["true"], timeout_s=REACH_TIMEOUT_S)
        finally:
            await host.close()

    asyncio.run(reach())


@contextlib.contextmanager
def bench_lock(spec: Spec) -> Iterator[None]:
    """One bench per spec name and per host port at a time: two would start variants of one
    name, or on one port, and stop each other's servers or leave them running."""
    folder = specpilot_home() / "locks"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    keys = {
        f"bench-{spec.name}": f"another bench of spec {spec.name!r} is running",
        f"port-{spec.host.target}-{spec.server.port}": (
            f"another bench uses port {spec.server.port} on {spec.host.target}"
        ),
    }
    with contextlib.ExitStack() as held:
        for key, busy in keys.items():
            handle = held.enter_context((folder / f"{re.sub(r'[^A-Za-z0-9._-]', '_', key)}.lock").open("a"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(
                    busy,
                    field="SPEC",
                    fix="wait for it to end, or give this spec another name and [server] port",
                ) from None
        yield


def run_bench(request: BenchRequest, notify: Notify) -> BenchResult:
    """Measure every variant (refused ones keep their reason); write bench.json.

    Whatever ends it (a variant's death, a signal, an error), every variant it started is
    stopped on the way out, with the ending signals held (launch.shield): a JobFailed names
    what survived that stop."""
    with bench_lock(request.spec):
        return _run_bench(request, notify)


def _run_bench(request: BenchRequest, notify: Notify) -> BenchResult:
    spec = request.spec
    source = open_prompts(request.prompts)
    reach_host(spec)
    sample = draw(source, request.sample_size, request.seed)
    settings = request.settings
    write_prompts(sample.rows, settings.sample_path)
    write_prompts(sample.rows[: min(len(sample.rows), 8)], settings.warmup_path)
    chars = sorted(sample.prompt_chars)
    notify(
        f"sample: {len(sample.rows)} of {sample.input_rows:,} rows, stratified by prompt length "
        f"({chars[0]:,} to {chars[-1]:,} characters, seed {sample.seed})"
    )
    if spec_method(spec) is None and all(v.method is None for v in request.variants):
        notify(
            "the spec turns on no speculative method ([engine] args): only the plain variant is measured "
            "(pass --variants plain,METHOD:1,METHOD:2 to compare one)"
        )
    rows: list[Measured] = []
    specs: dict[str, Spec] = {}
    started: list[str] = []
    try:
        for index, variant in enumerate(request.variants, start=1):
            take_over_signals()  # a generate job's loop hands them back to Python's defaults
            name = f"{spec.name}-bench-{variant.label}"[:64].lower().replace("_", "-")
            notify(f"[{index}/{len(request.variants)}] {variant.label}: check and plan")
            prepared = prepare(spec, variant, name)
            specs[variant.label] = prepared.spec
            folder = request.job_dir / SCRATCH_DIR / variant.label
            started.append(name)  # before the start: its engine may appear at any moment
            rows.append(measure(prepared, settings, folder, notify))
            if received():  # a signal whose interrupt something swallowed still ends the bench
                raise KeyboardInterrupt
    finally:
        left = stop_started(started)
        if left:
            raise JobFailed("; ".join(left) + " (stopping what the bench started)")
    measured = [r for r in rows if r.output_tokens_per_s and r.mean_output_tokens]
    total_done = sum(r.rows_done for r in measured)
    mean = (
        sum((r.mean_output_tokens or 0.0) * r.rows_done for r in measured) / total_done
        if total_done
        else None
    )
    for r in measured:
        r.projected_s = round(sample.input_rows * (mean or 0.0) / (r.output_tokens_per_s or 1.0), 1)
    winner = min(measured, key=lambda r: r.projected_s or float("inf")).label if measured else None
    data = {
        "specpilot_version": __version__,
        "spec": spec.name,
        "engine": spec.engine.name,
        "engine_version": spec.engine.version,
        "gpu": spec.gpu.name,
        "gpu_memory_gib": spec.gpu.memory_gib,
        "gpus_per_server": spec.gpu.count,
        "prompts": str(request.prompts),
        "input_rows": sample.input_rows,
        "sample": {
            "rows": len(sample.rows),
            "rejected_rows_in_file": sample.rejected_rows,
            "seed": sample.seed,
            "ids": [row.row_id for row in sample.rows],
            "prompt_chars": sample.prompt_chars,
        },
        "sampling": settings.sampling.to_json(),
        "budget_s": settings.budget_s,
        "warmup_s": settings.warmup_s,
        "steady_state": "longest interval with requests in flight >= ceil(0.9 x peak), "
        "as sglang.benchmark.steady_state_serving defines it",
        "mean_output_tokens": None if mean is None else round(mean, 1),
        "winner": winner,
        "variants": [r.to_json() for r in rows],
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_atomic(request.job_dir / BENCH_FILE, jsontext.dumps(data, indent=2) + "\n")
    return BenchResult(spec, rows, specs, winner, sample.input_rows, len(sample.rows), mean, data)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_best(result: BenchResult, path: Path) -> Spec:
    """The winning variant's spec as TOML at `path`, never over an existing file."""
    if result.winner is None:
        raise UserError(
            "no variant was measured, so there is no winner to write",
            field="--write",
            fix="see the table for why each variant did not run",
        )
    best = result.specs[result.winner].model_copy(update={"name": result.spec.name})
    if not Path(best.model.path).expanduser().is_absolute() and best.model_dir().exists():
        # a relative path means the spec's own folder: written elsewhere it must still find the model
        model = best.model.model_copy(update={"path": str(best.model_dir().resolve())})
        best = best.model_copy(update={"model": model})
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(spec_to_toml(best))
    except FileExistsError:
        raise UserError(f"{path} exists", field="--write", fix="choose a new file name") from None
    except OSError as err:
        raise UserError(
            f"cannot write {path}: {err.strerror}", field="--write", fix="choose a writable path"
        ) from None
    return best
