"""SGLang's startup lines, as it prints them (sglang 0.4 - 0.5.x log format).

Each line was seen in public engine logs; `source` names one place.
"""

from __future__ import annotations

from specpilot.engines.signatures import Kind, Signature, SignatureFix

_S = "sglang"

SIGNATURES: tuple[Signature, ...] = (
    Signature(_S, Kind.READY, "ready", r"The server is fired up and ready to roll!"),
    # progress phases, in the order SGLang passes them
    Signature(_S, Kind.PROGRESS, "init_distributed", r"Init torch distributed begin"),
    Signature(_S, Kind.PROGRESS, "loading_weights", r"Load weight begin"),
    Signature(_S, Kind.PROGRESS, "weights_loaded", r"Load weight end"),
    Signature(_S, Kind.PROGRESS, "allocating_kv", r"(?:Mamba|KV) Cache is allocated|Memory pool end"),
    # 0.5.13 "Capture cuda graph begin"; 0.5.17 "Capture target prefill CUDA graph begin", per family
    Signature(_S, Kind.PROGRESS, "cuda_graph_capture", r"Capture (?:[\w ]+ )?(?:cuda|CUDA) graph begin"),
    Signature(_S, Kind.PROGRESS, "graphs_captured", r"Capture (?:[\w ]+ )?(?:cuda|CUDA) graph end"),
    Signature(_S, Kind.PROGRESS, "http_server", r"Uvicorn running on|Started server process"),
    # fatal, specific first (tried in order over the whole error text)
    Signature(
        _S,
        Kind.FATAL,
        "spec_radix_no_buffer",
        r"Speculative decoding for \S+ is not compatible with radix cache when using "
        r"--mamba-scheduler-strategy no_buffer",
        cause="config",
        fix=SignatureFix(
            "use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1 "
            "(or disable radix cache)",
            args=("--mamba-scheduler-strategy", "extra_buffer"),
            env={"SGLANG_ENABLE_SPEC_V2": "1"},
        ),
        source="https://github.com/QwenLM/Qwen3.8/issues/108",
    ),
    Signature(
        _S,
        Kind.FATAL,
        "cuda_graph_oom",
        r"Capture cuda graph failed:.*(?:out of memory|OutOfMemory)",
        cause="oom",
        fix=SignatureFix(
            "CUDA graph capture ran out of memory: lower --mem-fraction-static "
            "(e.g. by 0.05) or --cuda-graph-max-bs (e.g. 16), or add --disable-cuda-graph"
        ),
        source="https://github.com/sgl-project/sglang/issues/5285",
    ),
    Signature(
        _S,
        Kind.FATAL,
        "prefill_graph_oom",
        r"(?s)(?:prefill_cuda_graph_runner|breakable_cuda_graph_backend).*"
        r"(?:CUDA error: out of memory|CUDA out of memory|OutOfMemoryError)",
        cause="oom",
        fix=SignatureFix(
            "the prefill CUDA graphs (captured up to --chunked-prefill-size tokens, 0.5.17+) did not "
            "fit in what the pools left: lower --mem-fraction-static (specpilot plan computes the value "
            "with the graphs counted)"
        ),
        source="real SGLang 0.5.17 on an H200 (tests/data/startup_logs/sglang-h200/r17-plain-rec-96.log)",
    ),
    Signature(
        _S,
        Kind.FATAL,
        "weights_leave_no_kv",
        r"Loaded weights leave no GPU memory for the KV cache under "
        r"--mem-fraction-static=(?P<given>[\d.]+)\. Raise --mem-fraction-static above (?P<minimum>[\d.]+)",
        cause="oom",
        fix=SignatureFix(
            "after the weights (draft included) and the hybrid state pool nothing was left for the KV "
            "cache at --mem-fraction-static {given}: raise --mem-fraction-static above {minimum} or "
            "lower --max-mamba-cache-size / --max-running-requests (specpilot plan computes all three)"
        ),
        source="real SGLang 0.5.17 on an H200 (tests/data/startup_logs/sglang-h200/r17-mtp-explicit-80.log)",
    ),
    Signature(
        _S,
        Kind.FATAL,
        "draft_worker_oom",
        r"(?s)(?:eagle_worker|EAGLEWorker|draft_worker|DraftWorker|multi_layer_eagle)"
        r".*(?:CUDA out of memory|OutOfMemoryError)",
        cause="oom",
        fix=SignatureFix(
            "the speculative draft model (weights + draft KV) did not fit after the target's "
            "KV pool: lower --mem-fraction-static (specpilot plan computes the value)"
        ),
        source="https://github.com/sgl-project/sglang/issues/6875",
    ),
    Signature(
        _S,
        Kind.FATAL,
        "kv_pool_empty",
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        cause="oom",
        fix=SignatureFix(
            "no memory was left for the KV cache after the weights: raise --mem-fraction-static, "
            "use more GPUs (--tp) or a smaller dtype"
        ),
        source="https://github.com/gpustack/gpustack/issues/3831",
    ),
)
