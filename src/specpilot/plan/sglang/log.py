"""Read the numbers an SGLang startup log prints, for calibration and plan checks.

The lines and which printing of each counts are declared in `engines/sglang/loglines.py`
(the same declarations `up` compares against the plan); this adds what is derived
from them.
"""

from __future__ import annotations

import re

from specpilot.engines.logfacts import LogFacts
from specpilot.engines.loglines import read_log
from specpilot.engines.sglang.loglines import QUANTITIES


def parse_sglang_log(text: str) -> LogFacts:
    """What an SGLang startup log printed; a field is None when the log lacks its line."""
    found = read_log(QUANTITIES, text)
    free_after, weights = found.get("free_after_load_gib"), found.get("weights_gib")
    if "free_before_load_gib" not in found and isinstance(free_after, float) and isinstance(weights, float):
        # a log kept from "Load weight end" on: free before = what was left + what loaded
        found["free_before_load_gib"] = round(free_after + weights, 2)
    if "draft_weights_gib" not in found:
        found.pop("draft_kv_tokens", None)  # a second pool of the target's own (sliding window)
    return LogFacts.from_values(found)


#: 0.5.16+: the prefill graph's capture begins, one line per model runner (target, draft)
PREFILL_CAPTURE_BEGIN = re.compile(r"Capture (?:target|draft) prefill CUDA graph begin")
PREFILL_CAPTURE_END = re.compile(r"Capture (?:target|draft) prefill CUDA graph end")
OUT_OF_MEMORY = re.compile(r"CUDA error: out of memory|CUDA out of memory|OutOfMemoryError")


def prefill_capture_oom(text: str) -> bool:
    """Whether the start ran out of memory while capturing a prefill CUDA graph: the last
    capture began, never ended, and an out-of-memory error follows it."""
    begins = list(PREFILL_CAPTURE_BEGIN.finditer(text))
    if not begins:
        return False
    after = text[begins[-1].end() :]
    return not PREFILL_CAPTURE_END.search(after) and bool(OUT_OF_MEMORY.search(after))
