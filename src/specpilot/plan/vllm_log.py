"""Read the numbers a vLLM startup log prints, for calibration (`plan --from-log`).

Each signature is one regular expression with the key it fills; the first match wins
(multi-GPU logs repeat every line once per worker, and the workers agree).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LogNumber:
    """Printed quantities: the keys they fill, in the order of the pattern's groups."""

    pattern: re.Pattern[str]
    keys: tuple[str, ...]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


_SIGNATURES: tuple[LogNumber, ...] = (
    LogNumber(re.compile(r"LLM engine \(v(?P<v>[0-9][^)\s]*)\)"), ("version",)),
    LogNumber(re.compile(r"vLLM API server version (?P<v>[0-9]\S*)"), ("version",)),
    LogNumber(re.compile(r"\bversion (?P<v>\d+\.\d+\.\d+\S*)"), ("version",)),
    LogNumber(re.compile(r"Model loading took (?P<v>[0-9.]+) Gi?B"), ("weights_gib",)),
    LogNumber(re.compile(r"Available KV cache memory: (?P<v>-?[0-9.]+) GiB"), ("available_kv_gib",)),
    LogNumber(re.compile(r"KV cache size: (?P<v>[0-9,]+) tokens"), ("kv_tokens",)),
    LogNumber(
        re.compile(r"Maximum concurrency for (?P<l>[0-9,]+) tokens per request: (?P<v>[0-9.]+)x"),
        ("max_model_len", "max_concurrency"),
    ),
    LogNumber(
        re.compile(r"Setting attention block size to (?P<v>\d+) tokens"),
        ("attention_block_size",),
    ),
    LogNumber(re.compile(r"Estimated CUDA graph memory: (?P<v>[0-9.]+) GiB"), ("cudagraph_gib",)),
    # 0.2x: "... Actual usage is W GiB for weight, A GiB for peak activation,
    #        N GiB for non-torch memory, and C GiB for CUDAGraph memory."
    LogNumber(
        re.compile(
            r"Free memory on device \((?P<f>[0-9.]+)/(?P<t>[0-9.]+) GiB\) on startup\. "
            r"Desired GPU memory utilization is \((?P<u>[0-9.]+), [0-9.]+ GiB\)\. "
            r"Actual usage is (?P<w>[0-9.]+) GiB for weight, (?P<a>[0-9.]+) GiB for peak "
            r"activation, (?P<n>[0-9.]+) GiB for non-torch memory, and (?P<c>[0-9.]+) GiB"
        ),
        (
            "free_before_load_gib",
            "gpu_total_gib",
            "gpu_memory_utilization",
            "weights_gib",
            "activation_peak_gib",
            "non_torch_gib",
            "cudagraph_actual_gib",
        ),
    ),
    # 0.3x: "... Actual usage is X GiB for consumed memory (weights + non-torch),
    #        A GiB for peak activation, and C GiB for CUDAGraph memory."
    LogNumber(
        re.compile(
            r"Free memory on device \((?P<f>[0-9.]+)/(?P<t>[0-9.]+) GiB\) on startup\. "
            r"Desired GPU memory utilization is \((?P<u>[0-9.]+), [0-9.]+ GiB\)\. "
            r"Actual usage is (?P<w>[0-9.]+) GiB for consumed memory \(weights \+ non-torch\), "
            r"(?P<a>[0-9.]+) GiB for peak activation, and (?P<c>[0-9.]+) GiB"
        ),
        (
            "free_before_load_gib",
            "gpu_total_gib",
            "gpu_memory_utilization",
            "consumed_gib",
            "activation_peak_gib",
            "cudagraph_actual_gib",
        ),
    ),
    # DEBUG lines (VLLM_LOGGING_LEVEL=DEBUG) printed right after profiling, before the KV
    # cache is allocated: the same terms as the summary line, present even when the start
    # then fails (gpu_worker.py:determine_available_memory).
    LogNumber(re.compile(r"Initial free memory: (?P<v>[0-9.]+) GiB"), ("free_before_load_gib",)),
    LogNumber(
        re.compile(
            r"torch peak memory increase: (?P<a>[0-9.]+) ?GiB; "
            r"non-torch forward increase memory: (?P<n>[0-9.]+) ?GiB"
        ),
        ("activation_peak_gib", "non_torch_gib"),
    ),
    # CPU backend (v1/worker/cpu_worker.py): "Explicitly set (1.0/23.54) GiB for KV cache"
    # (VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes) or "Auto set (X/T) GiB ...".
    LogNumber(
        re.compile(r"(?:Explicitly|Auto) set \((?P<v>[0-9.]+)/(?P<t>[0-9.]+)\) GiB for KV cache"),
        ("available_kv_gib", "gpu_total_gib"),
    ),
)


def parse_vllm_log(text: str) -> dict[str, float | str]:
    """The startup numbers found in a vLLM log: version, weights, KV budget, KV tokens...

    Keys (present only when printed): version, weights_gib, available_kv_gib,
    kv_tokens, max_model_len, max_concurrency, attention_block_size, cudagraph_gib,
    free_before_load_gib, gpu_total_gib, gpu_memory_utilization, activation_peak_gib,
    non_torch_gib, consumed_gib, cudagraph_actual_gib (on the CPU backend gpu_total_gib is
    the node's memory).
    """
    found: dict[str, float | str] = {}
    for signature in _SIGNATURES:
        if signature.keys[0] in found and signature.keys[0] != "free_before_load_gib":
            continue
        match = signature.pattern.search(text)
        if match is None:
            continue
        # groups are written in key order
        for key, raw in zip(signature.keys, match.groups(), strict=True):
            if key in found:
                continue
            found[key] = raw if key == "version" else _number(raw)
    return found
