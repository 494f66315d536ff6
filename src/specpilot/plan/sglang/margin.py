"""What the SGLang plan keeps free after the pools, beyond the post-pool terms.

Everything the engine allocates after its pools (graphs, activations, runtime buffers; before
0.5.14 the draft model) must fit in the reserve. Two ways to size it, by the release row:

- estimated (a row without `post_pool_fit`): each term is an estimate on the safe side, and the
  plan asks the reserve for `ESTIMATED_MARGIN_RATIO` more than their sum. The padding compounds:
  on the H200 matrix the engine had 0.9-3.5 GiB more free at ready than the plan's margin.
- fitted (the row's `post_pool_fit`, `specpilot.engines.sglang.postpool.PostPoolFit`): the fit's
  terms and its stated margin inside its measured range, its extrapolation margin outside it.
"""

from __future__ import annotations

from specpilot.engines.sglang.postpool import PostPoolFit

#: with estimated terms, the reserve must hold this many times their sum
ESTIMATED_MARGIN_RATIO = 1.10
#: with estimated terms, the highest --mem-fraction-static a recommendation may use: above it
#: the reserve is too small for the estimates' errors
ESTIMATED_HIGHEST_FRACTION = 0.95


def required_margin_gib(fit: PostPoolFit | None, needed_gib: float, extrapolating: bool = False) -> float:
    """Free memory the plan keeps beyond the post-pool terms: the fit's margin (its
    extrapolation margin outside its range), else the estimates' padding."""
    if fit is not None:
        return fit.margin_gib(extrapolating)
    return needed_gib * (ESTIMATED_MARGIN_RATIO - 1)


def highest_fraction(fit: PostPoolFit | None) -> float:
    """Where the recommendation's fraction search starts."""
    if fit is None or fit.highest_fraction is None:
        return ESTIMATED_HIGHEST_FRACTION
    return fit.highest_fraction
