"""What the SGLang plan keeps free after the pools, and the constants behind it, in one place.

Everything the engine allocates after its pools (graphs, activations, runtime buffers; before
0.5.14 the draft model) must fit in the reserve. Two ways to size it:

- estimated (every release without a fit): each term is an estimate on the safe side, and the
  plan asks the reserve for `ESTIMATED_MARGIN_RATIO` more than their sum. The padding compounds:
  on the H200 matrix the engine had 0.9-3.5 GiB more free at ready than the plan's margin.
- fitted (`FITS`): terms fitted to the lowest free memory measured during real starts (NVML
  samples on the log's phases, `plan --samples`), and one stated margin in GiB, with its reason.
  A fit sets only the terms its data pins down; the others keep their estimates.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from specpilot.engines.sglang.releases import SglangRelease

#: with estimated terms, the reserve must hold this many times their sum
ESTIMATED_MARGIN_RATIO = 1.10
#: with estimated terms, the highest --mem-fraction-static a recommendation may use: above it
#: the reserve is too small for the estimates' errors
ESTIMATED_HIGHEST_FRACTION = 0.95


@dataclass(frozen=True)
class PostPoolFit:
    """Post-pool terms of one release range fitted to measured startup peaks (None: the
    estimate stays), and the margin the plan keeps beyond them."""

    first: str
    last: str
    #: GiB the plan keeps free beyond the fitted terms at the lowest point of a start
    stated_margin_gib: float
    #: why that much (the measured peak's noise, what the fit leaves out)
    margin_reason: str
    #: where the fit, its data and its residuals are
    source: str
    #: bytes a breakable prefill graph holds per captured token per hidden unit per layer
    prefill_graph_bytes_per_token_hidden_layer: float | None = None
    #: one decode-side graph family: (fixed GiB, MiB per captured batch size)
    decode_graph_family: tuple[float, float] | None = None
    #: the activation estimate (prefill chunk + logits) times this: the warm-up's transient
    activation_scale: float | None = None
    #: attention backends' buffers and runtime buffers no term itemizes, GiB
    attention_workspace_gib: float | None = None
    unitemized_gib: float | None = None
    #: the highest --mem-fraction-static a recommendation may use (None: the estimates' 0.95)
    highest_fraction: float | None = None

    def covers(self, version: str) -> bool:
        base = Version(Version(version).base_version)
        return Version(self.first) <= base <= Version(self.last)


#: fits of measured startup peaks; docs/gpu-validation.md has each one's data and residuals
FITS: tuple[PostPoolFit, ...] = ()


def post_pool_fit(rules: SglangRelease) -> PostPoolFit | None:
    """The fit for a release row (a fit covers whole rows), None where its terms are estimated."""
    return next((fit for fit in FITS if fit.covers(rules.first) and fit.covers(rules.last)), None)


def required_margin_gib(fit: PostPoolFit | None, needed_gib: float) -> float:
    """Free memory the plan keeps beyond the post-pool terms: the stated margin of a fit, else
    the estimates' padding."""
    if fit is not None:
        return fit.stated_margin_gib
    return needed_gib * (ESTIMATED_MARGIN_RATIO - 1)


def highest_fraction(fit: PostPoolFit | None) -> float:
    """Where the recommendation's fraction search starts."""
    if fit is None or fit.highest_fraction is None:
        return ESTIMATED_HIGHEST_FRACTION
    return fit.highest_fraction
