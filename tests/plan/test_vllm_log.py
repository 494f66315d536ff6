"""parse_vllm_log on the line formats of the vLLM 0.2x and 0.3x releases."""

from __future__ import annotations

from specpilot.engines.logfacts import LogFacts
from specpilot.plan.vllm.log import parse_vllm_log


def test_version_from_engine_banner_and_api_server_lines() -> None:
    assert (
        parse_vllm_log("INFO [core.py:114] Initializing a V1 LLM engine (v0.26.0) with config").version
        == "0.26.0"
    )
    assert parse_vllm_log("INFO [api_server.py:1] vLLM API server version 0.9.0\n").version == "0.9.0"
    banner = "INFO [utils.py:297]   █▄█▀ █     █     █     █  version 0.18.0\n"
    assert parse_vllm_log(banner).version == "0.18.0"


def test_0_3x_kv_line_carries_tokens_and_concurrency_together() -> None:
    line = (
        "INFO [kv_cache_utils.py:2329] GPU KV cache size: 1,234,567 tokens, "
        "Maximum concurrency for 32,768 tokens per request: 37.68x"
    )
    parsed = parse_vllm_log(line)
    assert parsed.kv_tokens == 1_234_567
    assert parsed.max_model_len == 32_768
    assert parsed.max_concurrency == 37.68


def test_weights_block_size_and_first_worker_wins() -> None:
    text = (
        "(Worker_TP0) INFO Model loading took 25.71 GiB memory and 6.3 seconds\n"
        "(Worker_TP1) INFO Model loading took 25.70 GiB memory and 6.4 seconds\n"
        "INFO [interface.py:906] Setting attention block size to 784 tokens to ensure that "
        "attention page size is >= mamba page size.\n"
        "INFO Available KV cache memory: 70.12 GiB\n"
    )
    parsed = parse_vllm_log(text)
    assert parsed.weights_gib == 25.71
    assert parsed.attention_block_size == 784
    assert parsed.available_kv_gib == 70.12


def test_a_log_without_startup_numbers_gives_nothing() -> None:
    assert parse_vllm_log("INFO: Application startup complete.\n") == LogFacts()
