"""Credentials are recognised by whole words, so counts like MAX_TOKENS are never masked."""

from __future__ import annotations

import pytest

from specpilot.secrets import MASK, is_secret_flag, is_secret_name, mask_argv, redact, secret_values


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("SGLANG_MAX_TOKENS", False),
        ("VLLM_CPU_KVCACHE_SPACE", False),
        ("SGLANG_ENABLE_SPEC_V2", False),
    ],
)
def test_env_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("flag", "secret"),
    [
        ("--api-key", True),
        ("--hf-token=abc", True),
        ("--ssl-keyfile-password", True),
        ("--ssl-keyfile", False),
        ("--max-num-batched-tokens", False),
        ("--num-speculative-tokens", False),
        ("--tokenizer", False),
    ],
)
def test_flags(flag: str, secret: bool) -> None:
    assert is_secret_flag(flag) is secret


def test_token_counts_stay_visible_in_logs() -> None:
    argv = ["vllm", "--max-num-batched-tokens", "8192", "--api-key", "sk-live-123"]
    secrets = secret_values({"HF_TOKEN": "hf_abc", "SGLANG_MAX_TOKENS": "4096"}, argv)
    assert set(secrets) == {"hf_abc", "sk-live-123"}
    log = "chunk 8192 tokens, max 4096; key sk-live-123 token hf_abc"
    assert redact(log, secrets) == f"chunk 8192 tokens, max 4096; key {MASK} token {MASK}"
    assert mask_argv(argv) == ["vllm", "--max-num-batched-tokens", "8192", "--api-key", MASK]
