"""The share of GPU memory an engine takes (SGLang's --mem-fraction-static, vLLM's
--gpu-memory-utilization), as the SGLang planner and the bench step it down: one home for the
step and the floor, so a plan's ladder and a bench point's never disagree."""

from __future__ import annotations

#: the step between two fractions tried (two decimals, as the flags are written)
FRACTION_STEP = 0.01
#: the lowest fraction either one tries
LOWEST_FRACTION = 0.50
