"""Credentials are recognised by whole words, so counts like MAX_TOKENS are never masked."""

from __future__ import annotations

import pytest

from specpilot.secrets import (
    MASK,
    is_secret_flag,
    is_secret_name,
    mask_argv,
    mask_log_text,
    redact,
    secret_values,
    shown_url,
    url_without_credentials,
)


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


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "INFO [utils.py:233] non-default args: {'model': '/m', 'api_key': ['sk-1a2b'], 'port': 8000}",
            "INFO [utils.py:233] non-default args: {'model': '/m', 'api_key': ['***'], 'port': 8000}",
        ),
        (
            "server_args=ServerArgs(model_path='/m', api_key='sk-1a2b', admin_api_key=None, tp_size=1)",
            "server_args=ServerArgs(model_path='/m', api_key='***', admin_api_key=None, tp_size=1)",
        ),
        ("exec vllm --api-key sk-1a2b --port 8000", "exec vllm --api-key *** --port 8000"),
        ("exec vllm --hf-token=hf_x1 --port 8000", "exec vllm --hf-token=*** --port 8000"),
        ('{"HF_TOKEN": "hf_x1"}', '{"HF_TOKEN": "***"}'),
        # counts and words stay: only a value after a credential's name is hidden
        ("Prefill batch. #new-token: 6, #cached-token: 0, token usage: 0.00", None),
        ("max_num_batched_tokens=8192, password authentication failed", None),
    ],
)
def test_log_lines_are_masked_by_what_they_print(line: str, shown: str | None) -> None:
    assert mask_log_text(line) == (line if shown is None else shown)


@pytest.mark.parametrize(
    "line",
    [
        "401 Client Error: token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 is not valid",
        "upstream refused sk-proj-Ab12Cd34Ef56Gh78Ij90Kl (quota)",
        "cloning with ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 failed",
    ],
)
def test_a_token_of_a_known_shape_is_masked_in_prose(line: str) -> None:
    """No credential's name before it, and no record holding the value: its shape says it."""
    shown = mask_log_text(line)
    assert MASK in shown and not any(word.startswith(("hf_A", "sk-p", "ghp_")) for word in shown.split())


def test_words_shaped_like_a_token_prefix_stay() -> None:
    line = "using hf_transfer, sk-learn 1.5 and gh_pages; HF_HUB_ENABLE_HF_TRANSFER=1"
    assert mask_log_text(line) == line


def test_urls_lose_their_credentials() -> None:
    assert url_without_credentials("https://u:p%40ss@host:8000/v1") == "https://host:8000/v1"
    assert url_without_credentials("host:8000") == "host:8000"
    assert shown_url("http://u:pw@h:1/x?token=abc#f") == f"http://h:1/x?{MASK}"


def test_a_stored_argv_is_masked_and_its_values_come_back_from_the_spec() -> None:
    from specpilot.secrets import mask_tree, unmask_argv

    spec_args = ["--api-key", "sk-abcdef12", "--x=http://u:pw-123456@h", "--max-num-seqs", "48"]
    stored = mask_tree({"server_args": [*spec_args[:3], "--max-num-seqs", "24"]}, [])
    assert stored == {"server_args": ["--api-key", "***", "--x=http://u:***@h", "--max-num-seqs", "24"]}
    assert isinstance(stored, dict)
    assert unmask_argv(stored["server_args"], spec_args) == [*spec_args[:3], "--max-num-seqs", "24"]


def test_exact_secret_values_in_text_are_replaced_and_counted() -> None:
    from specpilot.secrets import CONTENT_MARKER, replace_secrets

    text, count = replace_secrets("key sk-abcdef12 twice: sk-abcdef12", ["sk-abcdef12"])
    assert (text, count) == (f"key {CONTENT_MARKER} twice: {CONTENT_MARKER}", 2)
