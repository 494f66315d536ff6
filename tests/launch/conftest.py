"""Fixtures for launch tests: an isolated home, free ports, specs that start stand-ins."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specpilot.hosts.memory import MemoryHost
from specpilot.spec import Spec, load_spec
from tests.fakeengines.standin import config_env
from tests.fixtures.memory_host import launch_host
from tests.fixtures.ports import free_port

FAKES = Path(__file__).resolve().parents[1] / "fakeengines"
STANDIN = FAKES / "standin.py"

SpecFactory = Callable[..., Spec]

#: a small dense Qwen3 shape, so check/plan have a real config.json to read
TINY_QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
}


@pytest.fixture
def run_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and SPECPILOT_HOME (the local registry, where a local run keeps all its files)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "state"))
    return home


def toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


@pytest.fixture
def make_spec(tmp_path: Path) -> SpecFactory:
    """A spec file whose engine is the stand-in playing `scenario`, with `standin` its other
    config fields (tests/fakeengines/standin.py's Config); returns the loaded Spec."""

    def make(
        scenario: str,
        *,
        engine: str = "sglang",
        name: str | None = None,
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
        standin: dict[str, Any] | None = None,
        args: list[str] | None = None,
        port: int | None = None,
        gpu_memory_gib: float = 95.6,
        hang_timeout_s: float = 600.0,
        ready_timeout_s: float = 120.0,
        host: dict[str, object] | None = None,
    ) -> Spec:
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps(TINY_QWEN3_CONFIG))
        engine_env = {**config_env(scenario=scenario, **(standin or {})), **(env or {})}
        sections = {
            "model": {"path": "model", "served_name": "fake-model"},
            "gpu": {"memory_gib": gpu_memory_gib},
            "engine": {
                "name": engine,
                "version": "0.5.13" if engine == "sglang" else "0.26.0",
                "command": command or [sys.executable, str(STANDIN)],
                "args": args or [],
                "env": engine_env,
            },
            "server": {
                "port": port or free_port(),
                "hang_timeout_s": hang_timeout_s,
                "ready_timeout_s": ready_timeout_s,
            },
            "host": host or {"target": "local"},
        }
        lines = [f'name = "{name or scenario.replace("_", "-")}"']
        for section, values in sections.items():
            lines.append(f"[{section}]")
            lines += [f"{key} = {toml_value(value)}" for key, value in values.items()]
        path = tmp_path / f"{name or scenario}.toml"
        path.write_text("\n".join(lines) + "\n")
        return load_spec(path)

    return make


@pytest.fixture
def memory_host(monkeypatch: pytest.MonkeyPatch) -> MemoryHost:
    """Every run of the test on one MemoryHost (its target "local"): `up`, `status`, `logs`,
    `down` and `runs` open it instead of this machine; a spawned stand-in plays its scenario
    there, with no process."""
    host = launch_host(target="local")
    for opener in ("specpilot.launch.up.open_host_section", "specpilot.launch.shield.open_host_section"):
        monkeypatch.setattr(opener, lambda section: host)
    monkeypatch.setattr("specpilot.launch.ops.host_for", lambda state: host)
    return host
