"""Planner vs engine for the H200 matrix: prints the Markdown tables of docs/gpu-validation.md.

For each gpu/specs/h200-<id>.toml: the vLLM plan alone, the plan calibrated with the run's
log cut at "Model loading took" (what `specpilot plan --from-log` sees before profiling),
and what the engine printed (tests/data/startup_logs/vllm/h200-<id>.json).

    PYTHONPATH=src python gpu/specs/compare.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from specpilot.check.resolved import resolve
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.types import Plan
from specpilot.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "data" / "startup_logs" / "vllm"
RUNS = ("hybrid-96", "hybrid-mtp-96", "dense-96", "hybrid-80", "hybrid-mtp-80", "dense-80")


def _term(plan: Plan, name: str) -> float:
    return next(t.gib for t in plan.terms if t.name == name)


def _calibrated(run: str, spec_path: Path, scratch: Path) -> Plan:
    lines = (LOGS / f"h200-{run}.log").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if "Model loading took" in line)
    cut = scratch / f"{run}.log"
    cut.write_text("".join(lines[: end + 1]))
    spec, facts = calibrate_from_log(resolve(load_spec(spec_path)), cut)
    return make_plan(resolve(spec), facts)


def _pct(planned: float, printed: float) -> str:
    return f"{(planned - printed) / printed * 100:+.2f}%"


def table(run: str, scratch: Path) -> str:
    spec_path = REPO / "gpu" / "specs" / f"h200-{run}.toml"
    meta = json.loads((LOGS / f"h200-{run}.json").read_text())
    printed = meta["printed"]
    alone, calibrated = make_plan(resolve(load_spec(spec_path))), _calibrated(run, spec_path, scratch)
    rows: list[tuple[str, str, Callable[[Plan], float], str]] = [
        ("weights (GiB)", "weights_gib", lambda p: p.weights_gib, "{:.2f}"),
        ("peak activation (GiB)", "activation_peak_gib", lambda p: _term(p, "peak activation"), "{:.2f}"),
        ("non-torch (GiB)", "non_torch_gib", lambda p: _term(p, "non-torch memory"), "{:.2f}"),
        (
            "available KV memory (GiB)",
            "available_kv_gib",
            lambda p: _term(p, "available KV cache memory"),
            "{:.2f}",
        ),
        (
            "attention block size (tokens)",
            "attention_block_size",
            lambda p: p.details.attention_block_size_tokens,
            "{:.0f}",
        ),
        ("KV tokens", "kv_tokens", lambda p: p.kv_tokens, "{:,.0f}"),
        (
            "max concurrency (8,192-token requests)",
            "max_concurrency",
            lambda p: p.details.max_concurrency,
            "{:.2f}",
        ),
    ]
    out = [
        f"### {run}: {meta['model'].split(',')[0]}, --gpu-memory-utilization "
        f"{meta['gpu_memory_utilization']} ({meta['emulated_card']})",
        "",
        "| quantity | engine printed | plan alone | error | calibrated (log to weights) | error |",
        "|---|---|---|---|---|---|",
    ]
    for label, key, get, fmt in rows:
        engine = printed.get(key, 16 if key == "attention_block_size" else None)
        a, c = float(get(alone)), float(get(calibrated))
        out.append(
            f"| {label} | {fmt.format(engine)} | {fmt.format(a)} | {_pct(a, engine)} | "
            f"{fmt.format(c)} | {_pct(c, engine)} |"
        )
    return "\n".join(out)


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        for run in RUNS:
            print(table(run, Path(scratch)))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
