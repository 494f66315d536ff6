"""Read the numbers a vLLM startup log prints, for calibration (`plan --from-log`).

Each signature is one regular expression with the key it fills; the first match wins
(multi-GPU logs repeat every line once per worker, and the workers agree).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LogNumber:
    """One printed quantity: the key it fills, its pattern, and the group names to read."""

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
)

_GROUP_ORDER = ("f", "t", "u", "w", "a", "n", "c")


def parse_vllm_log(text: str) -> dict[str, float | str]:
    """The startup numbers found in a vLLM log: version, weights, KV budget, KV tokens...

    Keys (present only when printed): version, weights_gib, available_kv_gib,
    kv_tokens, max_model_len, max_concurrency, attention_block_size, cudagraph_gib,
    free_before_load_gib, gpu_total_gib, gpu_memory_utilization, activation_peak_gib,
    non_torch_gib, consumed_gib, cudagraph_actual_gib.
    """
    found: dict[str, float | str] = {}
    for signature in _SIGNATURES:
        if signature.keys[0] in found and signature.keys[0] != "free_before_load_gib":
            continue
        match = signature.pattern.search(text)
        if match is None:
            continue
        groups = match.groupdict()
        values = _ordered_values(groups)
        for key, raw in zip(signature.keys, values, strict=True):
            if key in found:
                continue
            found[key] = raw if key == "version" else _number(raw)
    return found


def _ordered_values(groups: dict[str, str | None]) -> list[str]:
    """Group values in key order: ("l", "v") for concurrency, _GROUP_ORDER for the memory lines."""
    if "f" in groups or "a" in groups:
        return [value for name in _GROUP_ORDER if (value := groups.get(name)) is not None]
    if "l" in groups:
        return [str(groups["l"]), str(groups["v"])]
    return [str(groups["v"])]
