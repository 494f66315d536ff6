"""Fit SGLang 0.5.17's post-pool terms to the startup peaks measured on the H200.

    PYTHONPATH=src python3 gpu/sglang/fit.py [--holdout NAME,...]

Reads every start in tests/data/gpu-runs/ that has samples (`gpu/sglang/job.py` recorded it,
`gpu/sglang/import_peaks.py` imported it), measures each post-pool phase (the prefill graph's
capture: what it keeps and its transient above that; each decode-side graph family; the warm-up
request) on the samples, and fits the terms the 0.5.17 release row's `post_pool_fit` holds
(`src/specpilot/engines/sglang/postpool.py`'s `PostPoolFit`):

- prefill graph: the bytes per captured token per hidden unit per layer it keeps (largest ratio);
- activations: the prefill capture's transient above what it keeps, as a multiple of the plan's
  activation estimate (largest ratio; the capture runs the largest prefill chunk);
- decode-side graph families: fixed GiB + MiB per captured batch size, least squares, shifted up
  by the largest residual so no family measured above it;
- attention workspace and the runtime buffers no term itemizes: allocated inside the phases
  above (nothing is allocated between the pools' end and the first capture), so 0.

Then the plan of every start with the fit (its margin against the measured low point: the
residual), and the starts not used for fitting (`--holdout`) as out-of-sample checks.
Prints Markdown (docs/gpu-validation.md) and the `PostPoolFit` the numbers give.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peaks

from specpilot.check.resolved import resolve
from specpilot.engines.sglang import releases
from specpilot.engines.sglang.postpool import PostPoolFit
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.sglang.planner import planner_settings
from specpilot.plan.sglang.quantities import (
    BREAKABLE_GRAPH_BYTES_PER_TOKEN_HIDDEN_LAYER,
    prefill_activation_gib,
)
from specpilot.plan.startup_peak import Phase, StartupPeak
from specpilot.plan.types import Plan, SglangDetails
from specpilot.spec import load_spec

MATRIX = peaks.REPO / "tests" / "data" / "startup_logs" / "sglang-h200"

PREFIX = "sglang-0.5.17-h200-"
PREFILL = "graph: target prefill"
DECODE_SIDE = ("graph: target decode", "graph: target verify", "graph: draft decode", "graph: draft extend")
WARM_UP = "warm-up request"


@dataclass(frozen=True)
class Measured:
    """One start's post-pool phases, GiB (engine view: NVML less the start's median offset)."""

    name: str
    plan: Plan
    peak: StartupPeak
    capture_start_free_gib: float
    lowest_free_gib: float
    prefill_kept_gib: float | None
    prefill_transient_gib: float | None
    #: (family, captured batch sizes, GiB kept including its transient)
    families: tuple[tuple[str, int, float], ...]


def term(plan: Plan, prefix: str) -> float:
    return sum(t.gib for t in plan.terms if t.name.startswith(prefix))


def _next_start(phases: tuple[Phase, ...], index: int) -> float:
    return phases[index + 1].free_at_start_gib if index + 1 < len(phases) else phases[index].free_at_end_gib


def measure(name: str, plan: Plan, peak: StartupPeak) -> Measured:
    offset = peak.nvml_minus_engine_gib or 0.0
    phases = peak.phases
    capture_start = next((p.free_at_start_gib for p in phases if p.name == PREFILL), float("nan"))
    kept = transient = None
    families: list[tuple[str, int, float]] = []
    details = plan.details
    assert isinstance(details, SglangDetails)
    batch = min(details.cuda_graph_max_batch_size, plan.max_running_requests or 1)
    for i, phase in enumerate(phases):
        if phase.name == PREFILL:
            kept = phase.free_at_start_gib - _next_start(phases, i)
            transient = phase.drop_gib - kept
        elif phase.name in DECODE_SIDE:
            families.append(
                (
                    phase.name,
                    batch,
                    phase.free_at_start_gib - min(phase.lowest_free_gib, _next_start(phases, i)),
                )
            )
    return Measured(
        name,
        plan,
        peak,
        capture_start - offset,
        peak.lowest_free_gib - offset,
        kept,
        transient,
        tuple(families),
    )


def prefill_activation(name: str) -> float:
    """One prefill chunk's activation estimate for a recorded start (its spec as it ran)."""
    folder = peaks.DATA / name
    spec = load_spec(peaks.spec_path(folder))
    shape, args = plan_inputs(spec)
    return prefill_activation_gib(shape, planner_settings(spec, shape, args))


def printed_families() -> list[tuple[str, int, float]]:
    """(family, captured batch sizes, GiB) of the decode-side graphs the matrix logs printed
    (tests/data/startup_logs/sglang-h200/r17-*: 32,768- and 262,144-token contexts, which the
    sampled starts at 8,192 do not cover)."""
    found: list[tuple[str, int, float]] = []
    for log in sorted(MATRIX.glob("r17-*.log")):
        text = log.read_text(errors="replace")
        if "The server is fired up and ready to roll" not in text:
            continue
        plan = make_plan(resolve(load_spec(log.with_suffix(".toml"))))
        details = plan.details
        assert isinstance(details, SglangDetails)
        batch = min(details.cuda_graph_max_batch_size, plan.max_running_requests or 1)
        for family, gib in peaks.printed_graphs(text).items():
            if family != "target prefill":
                found.append((family, batch, gib))
    return found


#: the release the starts ran
RELEASE = "0.5.17"


@contextmanager
def row_fit(found: PostPoolFit | None) -> Iterator[None]:
    """Plan with `found` as the release row's post-pool fit (None: the estimates' plan)."""
    saved = releases.RELEASES
    releases.RELEASES = tuple(replace(r, post_pool_fit=found) if r.covers(RELEASE) else r for r in saved)
    try:
        yield
    finally:
        releases.RELEASES = saved


def fit(starts: list[Measured], printed: list[tuple[str, int, float]]) -> PostPoolFit:
    """The terms from the ready starts (a start that failed in a capture has no whole phase)."""
    ready = [m for m in starts if m.peak.ready and m.prefill_kept_gib is not None]
    coefficient = max(
        BREAKABLE_GRAPH_BYTES_PER_TOKEN_HIDDEN_LAYER
        * (m.prefill_kept_gib or 0.0)
        / term(m.plan, "prefill CUDA")
        for m in ready
    )
    scale = max((m.prefill_transient_gib or 0.0) / prefill_activation(m.name) for m in ready)
    points = [(batch, gib) for m in ready for _, batch, gib in m.families] + [(b, g) for _, b, g in printed]
    slope, intercept = statistics.linear_regression([b for b, _ in points], [g for _, g in points])
    intercept += max(g - (intercept + slope * b) for b, g in points)  # no family measured above it
    committed = releases.release_rules(RELEASE).post_pool_fit
    assert committed is not None, f"the {RELEASE} row has no post_pool_fit"
    return replace(
        committed,
        prefill_graph_bytes_per_token_hidden_layer=round(coefficient, 3),
        decode_graph_family=(round(intercept, 3), round(slope * 1024, 3)),
        capture_transient_scale=round(scale, 3),
    )


#: starts recorded to check the plan, not to fit it: the capture round (job.py step `capture`)
CHECK_ONLY = "-capture-"


def collect() -> list[Measured]:
    with row_fit(None):  # the estimates' plan: the fit starts from the terms it replaces
        return [
            measure(name, plan, peak)
            for name, _, plan, peak, _ in peaks.rows(peaks.DATA)
            if CHECK_ONLY not in name
        ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--holdout", default="", help="starts left out of the fit (comma-separated)")
    args = parser.parse_args()
    held = {n if n.startswith(PREFIX) else PREFIX + n for n in args.holdout.split(",") if n}
    starts = collect()
    found = fit([m for m in starts if m.name not in held], printed_families())
    print(
        "| start | ready | free when the prefill capture begins | lowest free (phase) "
        "| prefill graph kept / transient above it | decode-side families kept (batch sizes) |"
    )
    print("|---|---|---|---|---|---|")
    for m in starts:
        families = ", ".join(f"{f.removeprefix('graph: ')} {g:.2f} ({b})" for f, b, g in m.families)
        prefill = (
            f"{m.prefill_kept_gib:.2f} / {m.prefill_transient_gib or 0:.2f}"
            if m.peak.ready and m.prefill_kept_gib is not None
            else "- (failed in the capture)"
        )
        print(
            f"| {m.name.removeprefix(PREFIX)}{' (held out)' if m.name in held else ''} "
            f"| {'yes' if m.peak.ready else 'no'} | {m.capture_start_free_gib:.2f} "
            f"| {m.lowest_free_gib:.2f} ({m.peak.phase}) | {prefill} | {families or '-'} |"
        )
    print()
    with row_fit(found):
        fitted = {name: plan for name, _, plan, _, _ in peaks.rows(peaks.DATA)}
    print(
        "| start | plan's margin, estimated | plan's margin, fitted | measured lowest free "
        "| lowest - fitted margin |"
    )
    print("|---|---|---|---|---|")
    for m in starts:
        plan = fitted[m.name]
        estimated = peaks.margin_gib(m.plan)
        print(
            f"| {m.name.removeprefix(PREFIX)}{' (held out)' if m.name in held else ''} | {estimated:.2f} "
            f"| {peaks.margin_gib(plan):.2f} | {m.lowest_free_gib:.2f} "
            f"| {m.lowest_free_gib - peaks.margin_gib(plan):+.2f} |"
        )
    print()
    gain(found)
    print()
    print(found)


#: the job's specs as the sampled starts ran them (no speculation, MTP), before the plan's knobs
BASE_STARTS = (("none", f"{PREFIX}plain"), ("MTP, 3 draft tokens", f"{PREFIX}bench-bench-nextn-3"))


def recommended(plan: Plan) -> tuple[float, int]:
    """(fraction, running requests) of a plan's recommendation."""
    args = plan.recommended_args
    return float(args[args.index("--mem-fraction-static") + 1]), int(
        args[args.index("--max-running-requests") + 1]
    )


def gain(found: PostPoolFit) -> None:
    """The recommendation per card, estimated against fitted: what the padding cost."""
    print("| card GiB | speculation | estimated: fraction, requests | fitted: fraction, requests | gain |")
    print("|---|---|---|---|---|")
    for card in (79.6, 95.6, 139.8):
        for label, start in BASE_STARTS:
            base = load_spec(peaks.spec_path(peaks.DATA / start))
            args = base.engine.args[: base.engine.args.index("--mem-fraction-static")]
            engine = base.engine.model_copy(update={"args": args})
            spec = base.model_copy(
                update={"engine": engine, "gpu": base.gpu.model_copy(update={"memory_gib": card})}
            )
            plans = []
            for fits in (None, found):
                with row_fit(fits):
                    plans.append(make_plan(resolve(spec)))
            (a, b) = (recommended(p) for p in plans)
            change = f"{(b[1] - a[1]) / a[1]:+.0%}" if a[1] else "-"
            print(f"| {card} | {label} | {a[0]:.2f}, {a[1]} | {b[0]:.2f}, {b[1]} | {change} |")


if __name__ == "__main__":
    main()
