"""Time one `specpilot check` in-process (target < 50 ms) and as a command.

PYTHONPATH=src python bench/check_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from specpilot.check import check_args
from specpilot.check.spec_check import check_spec
from specpilot.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
#: the incident's second attempt, as the example spec states it (no_buffer + NEXTN + radix cache)
INCIDENT = load_spec(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml").engine.args


def _time_ms(fn: object, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    start = time.perf_counter()
    check_args("sglang", "0.5.13", INCIDENT, {}, "Qwen3_5ForConditionalGeneration")
    print(f"first check (loads the flag tables): {(time.perf_counter() - start) * 1000:.1f} ms")
    for version in ("0.5.13", "0.5.23"):
        times = _time_ms(
            lambda v=version: check_args("sglang", v, INCIDENT, {}, "Qwen3_5ForConditionalGeneration"), 200
        )
        print(
            f"check_args sglang {version}: median {statistics.median(times):.2f} ms, max {max(times):.2f} ms (200 runs)"
        )
    spec = load_spec(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml")
    times = _time_ms(lambda: check_spec(spec), 50)
    print(f"check_spec (reads config.json): median {statistics.median(times):.2f} ms (50 runs)")
    command = "from specpilot.cli.check import check; check.main()"
    spec_path = str(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", command, spec_path, "--json"],
        capture_output=True,
        check=False,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    elapsed_s = time.perf_counter() - start
    print(f"as a command (check SPEC --json, a fresh interpreter): {elapsed_s:.2f} s, exit {done.returncode}")


if __name__ == "__main__":
    main()
