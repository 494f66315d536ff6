"""Read the numbers an SGLang startup log prints, for calibration and plan checks.

The lines and which printing of each counts are declared in `engines/sglang/loglines.py`
(the same declarations `up` compares against the plan); this adds what is derived
from them.
"""

from __future__ import annotations

from typing import Any

from specpilot.engines.loglines import read_log
from specpilot.engines.sglang.loglines import QUANTITIES


def parse_sglang_log(text: str) -> dict[str, Any]:
    """Numbers from an SGLang startup log; keys are absent when the log lacks the line.

    Keys: version, architecture, free_before_load_gib, weights_gib, draft_weights_gib,
    kv_tokens, draft_kv_tokens, max_mamba_cache_size, max_running_requests, context_len,
    chunked_prefill_size, mem_fraction_static, tp_size.
    """
    found: dict[str, Any] = read_log(QUANTITIES, text)
    free_after = found.pop("free_after_load_gib", None)
    if "free_before_load_gib" not in found and free_after is not None and "weights_gib" in found:
        # a log kept from "Load weight end" on: free before = what was left + what loaded
        found["free_before_load_gib"] = round(free_after + found["weights_gib"], 2)
    if "draft_weights_gib" not in found:
        found.pop("draft_kv_tokens", None)  # a second pool of the target's own (sliding window)
    return found
