"""Pasted launch commands in every form users paste mean the same spec."""

from __future__ import annotations

import pytest

from specpilot.cmdline import parse_launch_command
from specpilot.errors import UserError

SGLANG_FLAGS = ["--tp", "2", "--speculative-algorithm", "NEXTN"]


@pytest.mark.parametrize(
    "tokens",
    [
        ["python", "-m", "sglang.launch_server", "--model-path", "/m", *SGLANG_FLAGS],
        ["python3", "-m", "sglang.launch_server", "--model", "/m", *SGLANG_FLAGS],
        [
            "/opt/venv/bin/python3.11",
            "-m",
            "sglang.launch_server",
            "--model-path=/m",
            *SGLANG_FLAGS,
        ],
        ["sglang", "serve", "--model-path", "/m", *SGLANG_FLAGS],
        ["X=1", "python", "-m", "sglang.launch_server", "--model-path", "/m", *SGLANG_FLAGS],
        ["env", "X=1", "python", "-m", "sglang.launch_server", "--model-path", "/m", *SGLANG_FLAGS],
        ["python -m sglang.launch_server --model-path /m \\\n  --tp 2 --speculative-algorithm NEXTN"],
    ],
)
def test_sglang_forms(tokens: list[str]) -> None:
    pasted = parse_launch_command(tokens)
    assert pasted.engine == "sglang"
    assert pasted.model_path == "/m"
    assert pasted.args == SGLANG_FLAGS
    assert pasted.gpu_count == 2


def test_env_assignments_become_engine_env() -> None:
    pasted = parse_launch_command(
        [
            "SGLANG_ENABLE_SPEC_V2=1",
            "A=b=c",
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/m",
        ]
    )
    assert pasted.env == {"SGLANG_ENABLE_SPEC_V2": "1", "A": "b=c"}


@pytest.mark.parametrize(
    "tokens",
    [
        ["vllm", "serve", "/m", "--max-model-len", "8192", "-tp", "4"],
        [
            "python",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "/m",
            "--max-model-len",
            "8192",
            "-tp",
            "4",
        ],
        ["vllm", "serve", "--max-model-len", "8192", "/m", "-tp", "4"],
    ],
)
def test_vllm_forms(tokens: list[str]) -> None:
    pasted = parse_launch_command(tokens)
    assert pasted.engine == "vllm"
    assert pasted.model_path == "/m"
    assert pasted.gpu_count == 4
    assert "/m" not in pasted.args


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ([], "empty"),
        (["bash", "launch.sh"], "cannot tell the engine"),
        (["python", "-m", "sglang.launch_server", "--tp", "2"], "names no model"),
    ],
)
def test_bad_commands(tokens: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_launch_command(tokens)
