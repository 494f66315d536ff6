"""SGLang's bounds after a death of memory while serving (`engines/bounds.py`)."""

from __future__ import annotations

from specpilot.engines.bounds import Bound

SERVING_BOUNDS: tuple[Bound, ...] = (
    Bound(
        "the radix cache's copy-on-write of SSM states ran out of memory",
        r"mamba_cow|mamba_pool\.copy_from",
        "--prefill-max-requests",
        "--max-running-requests",
        16,
        "tests/data/gpu-runs/sglang-0.5.17-h200-job/engine.log (SGLang 0.5.17 on an H200: "
        "model_runner._maybe_execute_deferred_mamba_cow_and_clear, one copy per request a prefill takes)",
    ),
    Bound(
        "the engine ran out of memory while serving",
        None,
        "--max-running-requests",
        None,
        64,
        "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
        "(--max-running-requests bounds the batch a step holds)",
    ),
)
