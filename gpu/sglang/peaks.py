"""Measured startup peaks against the plan: one row per start in tests/data/gpu-runs/.

    PYTHONPATH=src python3 gpu/sglang/peaks.py [DATA_DIR]

For each start `job.py` recorded (log, spec, samples): the plan calibrated from the log cut at the
target's weight-loading line, what it says is free after the pools (`available`) and after the
last startup allocation (`margin`), the lowest free memory the samples measured up to ready, as
the engine counts it (NVML less the median NVML-vs-`avail mem` gap), the phase it fell in, and
what the engine allocated after the pools up to that point (`needed`, measured: available less
the lowest), against the plan's terms. A second table gives each phase's own drop and the size
the engine printed for each CUDA-graph family. Prints the Markdown used in docs/gpu-validation.md.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from specpilot.check.resolved import resolve
from specpilot.engines.registry import engine_by_name
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.startup_peak import StartupPeak, measure_startup_peak
from specpilot.plan.types import Plan, SglangDetails
from specpilot.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "gpu-runs"
_markers = engine_by_name("sglang").startup_phases
assert _markers is not None
MARKERS = _markers
GRAPH_END = re.compile(
    r"Capture (?P<family>[a-z ]*?) ?(?:CUDA|cuda) graph end\..*?mem usage=(?P<gib>[\d.]+) ?GB"
)


def log_up_to_weights(text: str) -> str:
    lines = text.splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if "Load weight end" in line)
    return "".join(lines[: end + 1])


def spec_path(folder: Path) -> Path:
    """A recorded start's spec: the portable one import_peaks.py writes, else the one recorded."""
    return (sorted(folder.glob("*.repo.toml")) or sorted(folder.glob("*.toml")))[0]


def calibrated_plan(folder: Path, scratch: Path) -> tuple[float, Plan]:
    """(the card's GiB, the plan calibrated from the log up to the weights)."""
    cut = scratch / f"{folder.name}.log"
    cut.write_text(log_up_to_weights((folder / "engine.log").read_text(errors="replace")))
    spec, facts = calibrate_from_log(resolve(load_spec(spec_path(folder))), cut)
    return spec.gpu.memory_gib, make_plan(resolve(spec), facts)


def margin_gib(plan: Plan) -> float:
    assert isinstance(plan.details, SglangDetails)
    return plan.details.margin_gib


def engine_view_gib(peak: StartupPeak, gib: float) -> float:
    return gib - (peak.nvml_minus_engine_gib or 0.0)


def printed_graphs(text: str) -> dict[str, float]:
    return {(m["family"] or "decode"): float(m["gib"]) for m in GRAPH_END.finditer(text)}


Row = tuple[str, float, Plan, StartupPeak, dict[str, float]]


def rows(data: Path) -> list[Row]:
    found: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        for folder in sorted(p for p in data.iterdir() if (p / "samples").is_dir()):
            text = (folder / "engine.log").read_text(errors="replace")
            card, plan = calibrated_plan(folder, Path(scratch))
            peak = measure_startup_peak(folder / "samples", text, MARKERS)
            found.append((folder.name, card, plan, peak, printed_graphs(text)))
    return found


def main(data: str = str(DATA)) -> None:
    found = rows(Path(data))
    print(
        "| start | card GiB | fraction | ready | planned available after pools | planned need "
        "| planned margin | measured lowest free (engine) | phase | measured need | planned - measured |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, card, plan, peak, _ in found:
        available = margin_gib(plan) + plan.reserve_needed_gib
        lowest = engine_view_gib(peak, peak.lowest_free_gib)
        measured_need = available - lowest
        over = plan.reserve_needed_gib - measured_need
        print(
            f"| {name} | {card:.1f} | {plan.memory_fraction:.2f} | {'yes' if peak.ready else 'no'} "
            f"| {available:.2f} | {plan.reserve_needed_gib:.2f} | {margin_gib(plan):.2f} "
            f"| {lowest:.2f} | {peak.phase} | {measured_need:.2f} | {over:+.2f} |"
        )
    print()
    print("| start | phase | free at start (engine) | lowest (engine) | drop GiB | printed graph size GiB |")
    print("|---|---|---|---|---|---|")
    for name, _, _, peak, graphs in found:
        for phase in peak.phases:
            family = phase.name.removeprefix("graph: ")
            printed = f"{graphs[family]:.2f}" if phase.name.startswith("graph: ") and family in graphs else ""
            print(
                f"| {name} | {phase.name} | {engine_view_gib(peak, phase.free_at_start_gib):.2f} "
                f"| {engine_view_gib(peak, phase.lowest_free_gib):.2f} | {phase.drop_gib:.2f} | {printed} |"
            )
    for name, _, plan, _, _ in found:
        terms = ", ".join(f"{t.name} {t.gib:.2f}" for t in plan.terms[-8:])
        print(f"\n{name} planned post-pool terms: {terms}")


if __name__ == "__main__":
    main(*sys.argv[1:])
