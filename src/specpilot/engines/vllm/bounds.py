"""vLLM's bounds after a death of memory while serving (`engines/bounds.py`)."""

from __future__ import annotations

from specpilot.engines.bounds import Bound

SERVING_BOUNDS: tuple[Bound, ...] = (
    Bound(
        "the engine ran out of memory while serving",
        None,
        "--max-num-seqs",
        None,
        256,
        "https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py (max_num_seqs)",
    ),
)
