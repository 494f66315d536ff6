"""Cached engine environments for the conformance suite, keyed by their pinned requirements.

Layout under `${SPECPILOT_CACHE:-~/.cache/specpilot}/venvs/`:
  base-torch-2.13.0-<hash>/   a venv with CPU torch and what SGLang's validation imports
  sglang-<version>/           `pip install --no-deps --target` of the release wheel
A directory is complete when its `.complete` marker exists, so an interrupted build is redone.
The torchvision stub (tests/conformance/stubs) stands in for the CUDA-only PyPI torchvision.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

BASE_REQUIREMENTS = (
    "torch==2.13.0",
    "numpy",
    "transformers==5.6.0",
    "tokenizers<0.23.1",
    "huggingface-hub<2",
    "pydantic",
    "packaging",
    "requests",
    "orjson",
    "psutil",
    "pybase64",
    "triton",
    "pillow",
    "starlette",
    "msgspec",
    "ipython",
    "pyzmq",
    "aiohttp",
    "openai",
    "partial_json_parser",
    "dill",
    "sentencepiece",
    "xgrammar",
    "compressed-tensors",
    "einops",
    "gguf",
)
STUBS = Path(__file__).parent / "stubs"


def cache_root() -> Path:
    return Path(os.environ.get("SPECPILOT_CACHE", Path.home() / ".cache" / "specpilot")) / "venvs"


def _key(items: tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:12]


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def base_python() -> Path:
    """The interpreter of the shared base venv, built on first use."""
    root = cache_root() / f"base-torch-2.13.0-{_key(BASE_REQUIREMENTS)}"
    python = root / "bin" / "python"
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "venv", str(root)])
        pin = root / "torch-pin.txt"
        pin.write_text("torch==2.13.0\n")  # nothing may upgrade torch to a CUDA build
        _run([str(python), "-m", "pip", "install", "-q", "-c", str(pin), *BASE_REQUIREMENTS])
        (root / ".complete").touch()
    return python


def sglang_target(version: str) -> Path:
    """The release's files, installed without dependencies, built on first use."""
    target = cache_root() / f"sglang-{version}"
    if not (target / ".complete").exists():
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
