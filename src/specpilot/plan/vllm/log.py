"""Read the numbers a vLLM startup log prints, for calibration (`plan --from-log`).

The lines are declared in `engines/vllm/loglines.py` (the same declarations `up`
compares against the plan).
"""

from __future__ import annotations

from specpilot.engines.logfacts import LogFacts
from specpilot.engines.loglines import read_log
from specpilot.engines.vllm.loglines import QUANTITIES


def parse_vllm_log(text: str) -> LogFacts:
    """What a vLLM startup log printed (version, weights, KV budget, KV tokens...); a field is
    None when the log lacks its line (on the CPU backend gpu_total_gib is the node's memory)."""
    return LogFacts.from_values(read_log(QUANTITIES, text))
