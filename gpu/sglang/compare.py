"""Planner vs a real SGLang on the H200: one row per start in tests/data/startup_logs/sglang-h200/.

    PYTHONPATH=src python3 gpu/sglang/compare.py [ID_PREFIX]

For each start: the plan alone (spec only), the plan calibrated from the log cut at the target's
weight-loading line (`plan --from-log`), and what the engine printed; the verdict against
whether the engine reached ready. Prints the Markdown table used in docs/gpu-validation.md.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from specpilot.check.resolved import resolve
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.sglang.log import parse_sglang_log
from specpilot.plan.types import Plan
from specpilot.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"
WEIGHTS_LINE = "Load weight end"


def reached_ready(text: str) -> bool:
    return "The server is fired up and ready to roll" in text


def log_up_to_weights(text: str) -> str:
    """The log up to the target's "Load weight end" line: what exists before profiling."""
    lines = text.splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if WEIGHTS_LINE in line)
    return "".join(lines[: end + 1])


def plans(run: str, scratch: Path) -> tuple[Plan, Plan]:
    spec_path = DATA / f"{run}.toml"
    cut = scratch / f"{run}.log"
    cut.write_text(log_up_to_weights((DATA / f"{run}.log").read_text()))
    spec, facts = calibrate_from_log(resolve(load_spec(spec_path)), cut)
    return make_plan(resolve(load_spec(spec_path))), make_plan(resolve(spec), facts)


def _pct(planned: float, printed: float | None) -> str:
    if not printed:
        return "-"
    return f"{(planned - printed) / printed * 100:+.1f}%"


def row(run: str, scratch: Path) -> str:
    text = (DATA / f"{run}.log").read_text()
    printed = parse_sglang_log(text)
    alone, calibrated = plans(run, scratch)
    kv = printed.kv_tokens
    ready = reached_ready(text)
    verdict = "ok" if alone.fits == ready else "WRONG"
    return (
        f"| {run} | {'ready' if ready else 'failed'} | {'fits' if alone.fits else 'no'} {verdict} "
        f"| {kv or '-'} | {alone.kv_tokens} ({_pct(alone.kv_tokens, kv)}) "
        f"| {calibrated.kv_tokens} ({_pct(calibrated.kv_tokens, kv)}) "
        f"| {printed.max_mamba_cache_size or '-'} / {alone.state_slots} "
        f"| {printed.max_running_requests or '-'} / {alone.max_running_requests} "
        f"| {alone.details.margin_gib:.2f} |"
    )


def main(prefix: str = "") -> None:
    print(
        "| start | engine | plan verdict | KV tokens printed | plan alone | calibrated "
        "| slots printed / planned | max running printed / planned | planned margin GiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for path in sorted(DATA.glob(f"{prefix}*.toml")):
            print(row(path.stem, Path(scratch)))


if __name__ == "__main__":
    main(*sys.argv[1:])
