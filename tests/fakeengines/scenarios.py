"""What each stand-in engine prints and how it ends, as data.

The exception and status lines are the engines' own, as published in public
issues (source per scenario) or in the incident; traceback frames are the real
function names with abbreviated paths. `{ts}` is a SGLang timestamp, `{port}`,
`{host}`, `{pid}` come from the stand-in's argv and process. A step is
(delay_s, text); `fatal=True` on a step marks the line whose write time
bench/detect_latency.py measures from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

End = Literal["exit", "serve", "hang", "sigkill"]


@dataclass(frozen=True)
class Step:
    delay_s: float
    text: str
    fatal: bool = False


@dataclass(frozen=True)
class Scenario:
    engine: str
    steps: tuple[Step, ...]
    end: End
    exit_code: int = 1
    expected_cause: str = "ready"
    expected_signature: str | None = None
    source: str = ""
    children: int = 0  # helper processes in the same group (SGLang's scheduler, detokenizer)
    serve_before_ready: bool = False  # bind the port before the ready line (uvicorn, then warmup)
    #: printed once serving, when the stand-in config's `trigger_file` exists (a crash after ready)
    after_ready: tuple[Step, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)


SGL = "/usr/local/lib/python3.12/dist-packages/sglang"

_SGL_PROLOGUE = (
    Step(
        0.05,
        "[{ts}] server_args=ServerArgs(model_path='{model}', tokenizer_path='{model}', "
        "host='{host}', port={port}, mem_fraction_static=0.82, max_running_requests=None, "
        "speculative_algorithm='NEXTN', mamba_scheduler_strategy='extra_buffer', tp_size=1, "
        "api_key={api_key})",
    ),
    Step(0.05, "[{ts}] Using default HuggingFace chat template with detected content format: string"),
    Step(0.10, "[{ts} TP0] Init torch distributed begin."),
    Step(0.05, "[{ts} TP0] Init torch distributed ends. mem usage=0.00 GB"),
    Step(0.05, "[{ts} TP0] Load weight begin. avail mem=93.77 GB"),
)
_SGL_WEIGHTS_DONE = (
    Step(
        0.20,
        "[{ts} TP0] Load weight end. type=Qwen3_5ForConditionalGeneration, "
        "dtype=torch.bfloat16, avail mem=43.11 GB, mem usage=50.66 GB.",
    ),
)
_SGL_POOLS = (
    Step(
        0.05,
        "[{ts} TP0] Mamba Cache is allocated. max_mamba_cache_size: 96, "
        "conv_state size: 0.22GB, ssm_state size: 9.14GB",
    ),
    Step(0.05, "[{ts} TP0] KV Cache is allocated. #tokens: 295950, K size: 4.52 GB, V size: 4.52 GB"),
    Step(0.05, "[{ts} TP0] Memory pool end. avail mem=11.20 GB"),
)
_SGL_SCHEDULER_TB = (
    Step(0.05, "[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):"),
    Step(0.0, f'  File "{SGL}/srt/managers/scheduler.py", line 2761, in run_scheduler_process'),
    Step(0.0, "    scheduler = Scheduler("),
    Step(0.0, f'  File "{SGL}/srt/managers/scheduler.py", line 311, in __init__'),
    Step(0.0, "    self.tp_worker = TpModelWorker("),
    Step(0.0, f'  File "{SGL}/srt/managers/tp_worker.py", line 237, in __init__'),
    Step(0.0, "    self._model_runner = ModelRunner("),
    Step(0.0, f'  File "{SGL}/srt/model_executor/model_runner.py", line 322, in __init__'),
    Step(0.0, "    self.initialize(min_per_gpu_memory)"),
)
_OOM_TAIL = (
    "GPU 0 has a total capacity of 95.00 GiB of which 1.12 GiB is free. Including non-PyTorch "
    "memory, this process has 93.85 GiB memory in use. Of the allocated memory 92.60 GiB is "
    "allocated by PyTorch, and 601.53 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
_SIGQUIT = (
    Step(0.0, ""),
    Step(0.02, "[{ts}] Received sigquit from a child process. It usually means the child failed."),
)

#: an SGLang server up and ready at once: the start of the scenarios whose fault comes while serving
_SGLANG_SERVING_READY = (
    Step(0.05, "[{ts}] INFO:     Started server process [{pid}]"),
    Step(0.0, "[{ts}] INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"),
    Step(0.05, "[{ts}] The server is fired up and ready to roll!"),
)


SCENARIOS: dict[str, Scenario] = {
    "sglang_ready": Scenario(
        engine="sglang",
        steps=_SGL_PROLOGUE
        + _SGL_WEIGHTS_DONE
        + _SGL_POOLS
        + (
            Step(
                0.05,
                "[{ts} TP0] Capture cuda graph begin. This can take up to several minutes. "
                "avail mem=11.18 GB",
            ),
            Step(
                0.20,
                "[{ts} TP0] Capture cuda graph end. Time elapsed: 9.87 s. mem usage=1.02 GB. "
                "avail mem=10.16 GB.",
            ),
            Step(
                0.05,
                "[{ts} TP0] max_total_num_tokens=295950, chunked_prefill_size=8192, "
                "max_prefill_tokens=16384, max_running_requests=48, context_len=262144, "
                "available_gpu_mem=10.16 GB",
            ),
            Step(0.05, "[{ts}] INFO:     Started server process [{pid}]"),
            Step(0.0, "[{ts}] INFO:     Waiting for application startup."),
            Step(0.0, "[{ts}] INFO:     Application startup complete."),
            Step(0.0, "[{ts}] INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"),
            Step(0.20, '[{ts}] INFO:     127.0.0.1:40418 - "GET /model_info HTTP/1.1" 200 OK'),
            Step(0.05, '[{ts}] INFO:     127.0.0.1:40420 - "POST /generate HTTP/1.1" 200 OK'),
            Step(0.05, "[{ts}] The server is fired up and ready to roll!"),
        ),
        end="serve",
        serve_before_ready=True,
        children=2,
        source="https://github.com/sgl-project/sglang/issues/2468 (start sequence), "
        "Mamba/KV lines as in public Qwen3.x hybrid startup logs",
    ),
    # ready, then (the config's `die_after_answers` answers in) the serving-time OOM of the H200 job:
    # radix-cache hits whose SSM states are copied on write (tests/data/gpu-runs/sglang-0.5.17-h200-job)
    "sglang_serving_cow_oom": Scenario(
        engine="sglang",
        steps=_SGLANG_SERVING_READY,
        after_ready=(
            Step(0.0, "[{ts}] Scheduler hit an exception: Traceback (most recent call last):", fatal=True),
            Step(0.0, f'  File "{SGL}/srt/model_executor/model_runner.py", line 1575, in _forward_raw'),
            Step(0.0, "    self._maybe_execute_deferred_mamba_cow_and_clear(forward_batch)"),
            Step(0.0, f'  File "{SGL}/srt/mem_cache/memory_pool.py", line 970, in copy_from'),
            Step(0.0, "    temporal[:, dst_indices] = temporal[:, src_indices]"),
            Step(
                0.0,
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.06 GiB. GPU 0 has a "
                "total capacity of 139.80 GiB of which 3.46 GiB is free.",
            ),
            Step(0.0, "[{ts}] SIGQUIT received. signum=None, frame=None. It usually means one child failed."),
        ),
        end="serve",
        serve_before_ready=True,
        children=1,
        source="tests/data/gpu-runs/sglang-0.5.17-h200-job/engine.log (lines 287-330, shortened)",
    ),
    # ready, then (`die_after_answers` in) a serving-time OOM whose error names the CUDA runtime's
    # error alone (`cudaErrorMemoryAllocation`, as tests/data/startup_logs/sglang-h200/
    # r17-plain-rec-96.log prints it under the OOM), without "out of memory"
    "sglang_serving_alloc_oom": Scenario(
        engine="sglang",
        steps=_SGLANG_SERVING_READY,
        after_ready=(
            Step(0.0, "[{ts}] Scheduler hit an exception: Traceback (most recent call last):", fatal=True),
            Step(0.0, f'  File "{SGL}/srt/managers/scheduler.py", line 2784, in run_batch'),
            Step(0.0, "RuntimeError: CUDA driver error: cudaErrorMemoryAllocation"),
            Step(0.0, "[{ts}] SIGQUIT received. signum=None, frame=None. It usually means one child failed."),
        ),
        end="serve",
        serve_before_ready=True,
        children=1,
        source="constructed: the error name of r17-plain-rec-96.log line 121, alone on the error line",
    ),
    "sglang_incident_valueerror": Scenario(
        engine="sglang",
        steps=(
            Step(0.3, "Traceback (most recent call last):"),
            Step(0.0, '  File "<frozen runpy>", line 198, in _run_module_as_main'),
            Step(0.0, '  File "<frozen runpy>", line 88, in _run_code'),
            Step(0.0, f'  File "{SGL}/launch_server.py", line 29, in <module>'),
            Step(0.0, "    server_args = prepare_server_args(sys.argv[1:])"),
            Step(0.0, f'  File "{SGL}/srt/server_args.py", line 4710, in prepare_server_args'),
            Step(0.0, "    return ServerArgs.from_cli_args(raw_args)"),
            Step(0.0, f'  File "{SGL}/srt/server_args.py", line 4267, in from_cli_args'),
            Step(0.0, "    return cls(**{attr: getattr(args, attr) for attr in attrs})"),
            Step(0.0, '  File "<string>", line 322, in __init__'),
            Step(0.0, f'  File "{SGL}/srt/server_args.py", line 642, in __post_init__'),
            Step(0.0, "    self._handle_model_specific_adjustments()"),
            Step(0.0, f'  File "{SGL}/srt/server_args.py", line 1389, in _handle_model_specific_adjustments'),
            Step(0.0, "    raise ValueError("),
            Step(
                0.0,
                "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not "
                "compatible with radix cache when using --mamba-scheduler-strategy no_buffer.To use "
                "radix cache with speculative decoding, please use --mamba-scheduler-strategy "
                "extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.",
                fatal=True,
            ),
        ),
        end="exit",
        exit_code=1,
        expected_cause="config",
        expected_signature="spec_radix_no_buffer",
        source="docs/incident.md",
    ),
    "sglang_oom_weights": Scenario(
        engine="sglang",
        steps=_SGL_PROLOGUE
        + _SGL_SCHEDULER_TB
        + (
            Step(0.0, f'  File "{SGL}/srt/model_executor/model_runner.py", line 441, in initialize'),
            Step(0.0, "    self.load_model()"),
            Step(0.0, f'  File "{SGL}/srt/model_executor/model_runner.py", line 871, in load_model'),
            Step(0.0, "    self.model = get_model("),
            Step(
                0.0,
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.90 GiB. " + _OOM_TAIL,
                fatal=True,
            ),
        )
        + _SIGQUIT,
        end="sigkill",
        children=1,
        expected_cause="oom",
        expected_signature="cuda_oom",
        source="https://github.com/fudan-generative-vision/hallo/issues/143 (torch OOM text)",
    ),
    "sglang_oom_cuda_graph": Scenario(
        engine="sglang",
        steps=_SGL_PROLOGUE
        + _SGL_WEIGHTS_DONE
        + _SGL_POOLS
        + (
            Step(
                0.05,
                "[{ts} TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.20 GB",
            ),
        )
        + _SGL_SCHEDULER_TB
        + (
            Step(0.0, f'  File "{SGL}/srt/model_executor/model_runner.py", line 2115, in init_device_graphs'),
            Step(0.0, "    self.graph_runner = CudaGraphRunner(self)"),
            Step(0.0, f'  File "{SGL}/srt/model_executor/cuda_graph_runner.py", line 269, in __init__'),
            Step(0.0, "    raise Exception("),
            Step(
                0.0,
                "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate "
                "448.00 MiB. " + _OOM_TAIL,
                fatal=True,
            ),
            Step(0.0, "Possible solutions:"),
            Step(0.0, "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)"),
            Step(0.0, "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)"),
            Step(0.0, "3. disable torch compile by not using --enable-torch-compile"),
            Step(
                0.0, "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"
            ),
            Step(0.0, "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "),
        )
        + _SIGQUIT,
        end="sigkill",
        children=1,
        expected_cause="oom",
        expected_signature="cuda_graph_oom",
        source="https://github.com/sgl-project/sglang/issues/5285",
    ),
    "sglang_draft_oom": Scenario(
        engine="sglang",
        steps=_SGL_PROLOGUE
        + _SGL_WEIGHTS_DONE
        + _SGL_POOLS
        + (
            Step(0.05, "[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):"),
            Step(0.0, f'  File "{SGL}/srt/managers/scheduler.py", line 2761, in run_scheduler_process'),
            Step(0.0, "    scheduler = Scheduler("),
            Step(0.0, f'  File "{SGL}/srt/managers/scheduler.py", line 330, in __init__'),
            Step(0.0, "    self.draft_worker = DraftWorkerClass("),
            Step(0.0, f'  File "{SGL}/srt/speculative/eagle_worker.py", line 129, in __init__'),
            Step(0.0, "    super().__init__("),
            Step(0.0, f'  File "{SGL}/srt/managers/tp_worker.py", line 237, in __init__'),
            Step(0.0, "    self._model_runner = ModelRunner("),
            Step(0.0, f'  File "{SGL}/srt/model_executor/model_runner.py", line 871, in load_model'),
            Step(0.0, "    self.model = get_model("),
            Step(
                0.0,
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. " + _OOM_TAIL,
                fatal=True,
            ),
        )
        + _SIGQUIT,
        end="sigkill",
        children=1,
        expected_cause="oom",
        expected_signature="draft_worker_oom",
        source="https://github.com/sgl-project/sglang/issues/6875",
    ),
    "sglang_nccl": Scenario(
        engine="sglang",
        steps=_SGL_PROLOGUE[:3]
        + _SGL_SCHEDULER_TB
        + (
            Step(
                0.0, f'  File "{SGL}/srt/model_executor/model_runner.py", line 559, in init_torch_distributed'
            ),
            Step(0.0, "    initialize_model_parallel("),
            Step(
                0.0,
                f'  File "{SGL}/srt/distributed/device_communicators/pynccl_wrapper.py", '
                "line 350, in NCCL_CHECK",
            ),
            Step(0.0, '    raise RuntimeError(f"NCCL error: {error_str}")'),
            Step(
                0.0,
                "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
                fatal=True,
            ),
        )
        + _SIGQUIT,
        end="sigkill",
        children=1,
        expected_cause="nccl",
        expected_signature="nccl",
        source="https://github.com/sgl-project/sglang/issues/4289",
    ),
    "sglang_address_in_use": Scenario(
        engine="sglang",
        steps=_SGL_PROLOGUE
        + _SGL_WEIGHTS_DONE
        + _SGL_POOLS
        + (
            Step(0.05, "[{ts}] INFO:     Started server process [{pid}]"),
            Step(0.0, "[{ts}] INFO:     Waiting for application startup."),
            Step(0.0, "[{ts}] INFO:     Application startup complete."),
            Step(
                0.0,
                "[{ts}] ERROR:    [Errno 98] error while attempting to bind on address "
                "('{host}', {port}): address already in use",
                fatal=True,
            ),
            Step(0.0, "[{ts}] INFO:     Waiting for application shutdown."),
            Step(0.0, "[{ts}] INFO:     Application shutdown complete."),
        ),
        end="exit",
        exit_code=1,
        children=1,
        expected_cause="port_in_use",
        expected_signature="address_in_use",
        source="https://github.com/wandb/openui/issues/226 (uvicorn bind error text)",
    ),
    "sglang_hang_after_weights": Scenario(
        engine="sglang",
        steps=_SGL_PROLOGUE + _SGL_WEIGHTS_DONE,
        end="hang",
        children=1,
        expected_cause="hang",
    ),
    "vllm_unrecognized_args": Scenario(
        engine="vllm",
        steps=(
            Step(0.3, "usage: api_server.py [-h] [--host HOST] [--port PORT] [--model MODEL]"),
            Step(0.0, "                     [--max-model-len MAX_MODEL_LEN]"),
            Step(
                0.0,
                "api_server.py: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer",
                fatal=True,
            ),
        ),
        end="exit",
        exit_code=2,
        expected_cause="bad_args",
        expected_signature="unrecognized_arguments",
        source="argparse's own message format",
    ),
    "vllm_kv_does_not_fit": Scenario(
        engine="vllm",
        steps=(
            Step(
                0.2,
                "(EngineCore pid={pid}) INFO 09-01 19:53:30 [gpu_model_runner.py:2602] "
                "Model loading took 50.9321 GiB and 41.207 seconds",
            ),
            Step(
                0.1,
                "(EngineCore pid={pid}) INFO 09-01 19:53:43 [gpu_worker.py:298] Available KV "
                "cache memory: 1.56 GiB",
            ),
            Step(
                0.05, "(EngineCore pid={pid}) ERROR 09-01 19:53:44 [core.py:1346] EngineCore failed to start."
            ),
            Step(
                0.0,
                "(EngineCore pid={pid}) ERROR 09-01 19:53:44 [core.py:1346] Traceback (most "
                "recent call last):",
            ),
            Step(
                0.0,
                "(EngineCore pid={pid}) ERROR 09-01 19:53:44 [core.py:1346]   File "
                '"/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", '
                "line 687, in check_enough_kv_cache_memory",
            ),
            Step(0.0, "(EngineCore pid={pid}) ERROR 09-01 19:53:44 [core.py:1346]     raise ValueError("),
            Step(
                0.0,
                "(EngineCore pid={pid}) ERROR 09-01 19:53:44 [core.py:1346] ValueError: To serve "
                "at least one request with the model's max seq len (65536), (4.76 GiB KV cache is "
                "needed, which is larger than the available KV cache memory (1.56 GiB). Based on the "
                "available memory, the estimated maximum model length is 15984. Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                "engine.",
                fatal=True,
            ),
            Step(
                0.3,
                "RuntimeError: Engine core initialization failed. See root cause above. "
                "Failed core proc(s): {}",
            ),
        ),
        end="exit",
        exit_code=1,
        expected_cause="oom",
        expected_signature="max_model_len_does_not_fit",
        source="https://github.com/syv-ai/qwen38-27b-rtx3090/issues/39",
    ),
    "vllm_ready": Scenario(
        engine="vllm",
        steps=(
            # vLLM prints the flags given in argv, an --api-key among them (a key from
            # VLLM_API_KEY is not an arg and is not printed)
            Step(
                0.05,
                "(APIServer pid={pid}) INFO 11-08 11:00:01 [utils.py:233] non-default args: "
                "{'model': '{model}', 'host': '{host}', 'port': {port}{api_key_arg}}",
            ),
            Step(0.05, "INFO:     Started server process [{pid}]"),
            Step(0.0, "INFO:     Waiting for application startup."),
            Step(0.0, "INFO:     Application startup complete."),
        ),
        end="serve",
        source="vLLM 0.26 vllm/entrypoints/utils.py log_non_default_args (the line's shape)",
    ),
    "vllm_crash_after_ready": Scenario(
        engine="vllm",
        steps=(
            Step(0.05, "INFO:     Started server process [{pid}]"),
            Step(0.0, "INFO:     Waiting for application startup."),
            Step(0.0, "INFO:     Application startup complete."),
        ),
        after_ready=tuple(
            Step(0.0, "eap-llm-server-on-arc  | " + text, fatal=text.startswith("ERROR 11-08 11:01:29"))
            for text in (
                'INFO:     127.0.0.1:48802 - "GET /health HTTP/1.1" 200 OK',
                "ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc VllmWorker-3 died "
                "unexpectedly, shutting down executor.",
                "ERROR 11-08 11:01:30 [core.py:502] EngineCore encountered a fatal error.",
                "ERROR 11-08 11:01:30 [core.py:502] Traceback (most recent call last):",
                'ERROR 11-08 11:01:30 [core.py:502]   File "/usr/local/lib/python3.10/dist-packages/'
                'vllm/v1/engine/core.py", line 493, in run_engine_core',
                "ERROR 11-08 11:01:30 [core.py:502]     engine_core.run_busy_loop()",
            )
        ),
        end="serve",  # ready: the crash comes later (tests/launch/test_crash_after_ready.py)
        source="https://github.com/intel/llm-scaler/issues/154 (the lines after /health answered 200)",
    ),
}
