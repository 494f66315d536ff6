"""How long one `plan` takes: in-process (target < 50 ms) and as a command (target < 1 s).

Prints numbers; asserts nothing. Run: python bench/plan_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from specpilot.check.resolved import resolve
from specpilot.plan import make_plan
from specpilot.spec import load_spec

EXAMPLES = Path(__file__).parents[1] / "examples"
SPECS = ["qwen36-27b-mtp-sglang.toml", "qwen36-27b-mtp-vllm.toml", "qwen3-8b-vllm.toml"]


def in_process_ms(spec_file: Path, repeats: int = 50) -> tuple[float, float]:
    spec = load_spec(spec_file)
    make_plan(resolve(spec))  # warm: imports, config read into the OS cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        make_plan(resolve(load_spec(spec_file)))
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


def command_s(spec_file: Path, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "specpilot", "plan", str(spec_file), "--json"],
            stdout=subprocess.DEVNULL,
            check=False,
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    print(f"{'spec':34} {'in-process median':>18} {'max':>8} {'as a command':>13}")
    for name in SPECS:
        median_ms, max_ms = in_process_ms(EXAMPLES / name)
        print(f"{name:34} {median_ms:15.2f} ms {max_ms:5.1f} ms {command_s(EXAMPLES / name):11.3f} s")
    print("targets: < 50 ms in-process, < 1 s as a command")


if __name__ == "__main__":
    main()
