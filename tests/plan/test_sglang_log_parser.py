"""`parse_sglang_log` on the line formats SGLang 0.5.10-0.5.23 print."""

from __future__ import annotations

from specpilot.engines.logfacts import LogFacts
from specpilot.plan.sglang.log import parse_sglang_log

SPECULATIVE_LOG = """\
[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, mem_fraction_static=0.85, ...)
[2026-05-01 10:00:01 TP0] Load weight begin. avail mem=94.89 GB
[2026-05-01 10:00:40 TP0] Load weight end. elapsed=39.1 s, type=Qwen3_5ForConditionalGeneration, dtype=torch.bfloat16, avail mem=44.02 GB, mem usage=50.87 GB.
[2026-05-01 10:00:41 TP0] Mamba Cache is allocated. max_mamba_cache_size: 66, conv_state size: 0.18GB, ssm_state size: 9.28GB intermediate_ssm_state_cache size: 7.31GB intermediate_conv_window_cache size: 0.14GB
[2026-05-01 10:00:41 TP0] KV Cache is allocated. #tokens: 319193, K size: 9.74 GB, V size: 9.74 GB
[2026-05-01 10:00:50 TP0] Load weight end. type=Qwen3_5ForCausalLMMTP, dtype=torch.bfloat16, avail mem=1.20 GB, mem usage=5.53 GB.
[2026-05-01 10:00:50 TP0] KV Cache is allocated. #tokens: 319193, K size: 0.61 GB, V size: 0.61 GB
[2026-05-01 10:01:30 TP0] max_total_num_tokens=319193, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=13, context_len=262144, available_gpu_mem=0.90 GB
"""


def test_reads_every_number_of_a_speculative_hybrid_start() -> None:
    parsed = parse_sglang_log(SPECULATIVE_LOG)
    assert parsed == LogFacts(
        architecture="Qwen3_5ForConditionalGeneration",
        weights_gib=50.87,
        free_before_load_gib=94.89,
        free_after_load_gib=44.02,
        draft_weights_gib=5.53,
        kv_tokens=319193,
        draft_kv_tokens=319193,
        max_mamba_cache_size=66,
        max_running_requests=13,
        context_len=262144,
        chunked_prefill_size=8192,
        mem_fraction_static=0.85,
        tp_size=1,
    )


def test_free_memory_falls_back_to_load_end_plus_usage() -> None:
    parsed = parse_sglang_log(
        "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=16.00 GB, "
        "mem usage=7.08 GB.\n"
    )
    assert parsed.free_before_load_gib == 23.08


def test_version_from_an_install_line_and_capped_requests() -> None:
    parsed = parse_sglang_log(
        "Successfully installed sglang-0.5.13.post1\n"
        "sglang==0.5.13.post1\n"
        "max_running_requests is capped to 24 by the mamba state cache (max_mamba_cache_size=124)\n"
    )
    assert parsed.version == "0.5.13.post1"
    assert parsed.max_running_requests == 24


def test_an_unrelated_log_yields_nothing() -> None:
    assert parse_sglang_log("INFO: Application startup complete.\n") == LogFacts()
