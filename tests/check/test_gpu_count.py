"""`[gpu] count` above what one server uses (TP x PP) is said: those GPUs would sit idle."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.check import check_spec
from specpilot.spec import Spec, load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _with_count(name: str, count: int, extra_args: list[str] | None = None) -> Spec:
    spec = load_spec(EXAMPLES / name)
    engine = spec.engine.model_copy(update={"args": [*spec.engine.args, *(extra_args or [])]})
    return spec.model_copy(update={"gpu": spec.gpu.model_copy(update={"count": count}), "engine": engine})


@pytest.mark.parametrize("name", ["qwen36-27b-mtp-sglang-fixed.toml", "qwen3-8b-vllm.toml"])
def test_four_gpus_with_tp_1_is_a_warning(name: str) -> None:
    result = check_spec(_with_count(name, 4))
    [finding] = [f for f in result.findings if f.rule == "gpu-count-unused"]
    assert finding.severity == "warning"
    assert finding.message.startswith("[gpu] count = 4 but one server uses 1 GPU")
    assert finding.fix is not None and "set --tp 4" in finding.fix.describe()


@pytest.mark.parametrize(("count", "args"), [(2, ["--tensor-parallel-size", "2"]), (1, [])])
def test_a_count_the_server_uses_is_quiet(count: int, args: list[str]) -> None:
    findings = check_spec(_with_count("qwen3-8b-vllm.toml", count, args)).findings
    assert "gpu-count-unused" not in [f.rule for f in findings]
