"""The key a job's or bench's requests send is the one the engine starts with: with the flag
given twice, the last (argparse keeps the last; a spec's own args then a fix's appended)."""

from __future__ import annotations

import pytest

from specpilot.engines.registry import engine_by_name
from specpilot.launch.command import api_key_of
from specpilot.spec import Spec


def _spec(args: list[str], env: dict[str, str] | None = None) -> Spec:
    return Spec.model_validate(
        {
            "name": "keyed",
            "model": {"path": "/m"},
            "gpu": {"name": "H200", "memory_gib": 139.8},
            "engine": {"name": "vllm", "version": "0.26.0", "args": args, "env": env or {}},
        }
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--api-key", "sk-first", "--port", "8000", "--api-key", "sk-last"],
        ["--api-key=sk-first", "--api-key", "sk-last"],
        ["--api-key", "sk-first", "--api-key=sk-last"],
    ],
)
def test_the_last_key_given_is_the_one_sent(args: list[str]) -> None:
    assert api_key_of(_spec(args), engine_by_name("vllm")) == "sk-last"


def test_without_the_flag_the_variable_the_engine_reads_is_sent() -> None:
    spec = _spec(["--port", "8000"], {"VLLM_API_KEY": "sk-from-env"})
    assert api_key_of(spec, engine_by_name("vllm")) == "sk-from-env"
