"""What the SGLang plan keeps free after the pools, and the constants behind it, in one place.

Everything the engine allocates after its pools (graphs, activations, runtime buffers; before
0.5.14 the draft model) must fit in the reserve. Two ways to size it:

- estimated (every release without a fit): each term is an estimate on the safe side, and the
  plan asks the reserve for `ESTIMATED_MARGIN_RATIO` more than their sum. The padding compounds:
  on the H200 matrix the engine had 0.9-3.5 GiB more free at ready than the plan's margin.
- fitted (`FITS`): terms fitted to the lowest free memory measured during real starts (NVML
  samples on the log's phases, `plan --samples`), and one stated margin in GiB, with its reason.
  A fit sets only the terms its data pins down; the others keep their estimates. The fit's
  peak is phase-ordered: the prefill graph's capture transient comes before the decode-side
  graphs are captured (`gpu/sglang/fit.py` prints the fit and its residuals).
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
    #: the prefill graph capture's transient above what the graph keeps, as a multiple of one
    #: prefill chunk's activation estimate: the capture runs the largest chunk eagerly first.
    #: Decode-side graphs are captured after it, so they do not add to this peak.
    capture_transient_scale: float | None = None
    #: attention backends' buffers and runtime buffers no term itemizes, GiB
    attention_workspace_gib: float | None = None
    unitemized_gib: float | None = None
    #: the highest --mem-fraction-static a recommendation may use (None: the estimates' 0.95)
    highest_fraction: float | None = None

    def covers(self, version: str) -> bool:
        base = Version(Version(version).base_version)
        return Version(self.first) <= base <= Version(self.last)


#: the fit's numbers as `gpu/sglang/fit.py` prints them (tests/plan/test_sglang_fit.py refits)
FIT_PREFILL_BYTES_PER_TOKEN_HIDDEN_LAYER = 1.227
FIT_DECODE_FAMILY = (0.375, 0.665)
FIT_CAPTURE_SCALE = 2.856
#: 0.5.17 on the H200 (tests/data/gpu-runs/sglang-0.5.17-h200-*, `gpu/sglang/fit.py`): every
#: start's lowest free memory fell in the prefill graph's capture
FIT_0517 = PostPoolFit(
    "0.5.17",
    "0.5.17",
    stated_margin_gib=0.5,
    margin_reason=(
        "the low point of the same knobs moved 0.1 GiB between starts, one step (0.01) above "
        "the last fitting step left 0.06-0.09 GiB or failed, and the fit covers one model shape"
    ),
    source="docs/gpu-validation.md (the startup peak, fitted)",
    prefill_graph_bytes_per_token_hidden_layer=FIT_PREFILL_BYTES_PER_TOKEN_HIDDEN_LAYER,
    decode_graph_family=FIT_DECODE_FAMILY,
    capture_transient_scale=FIT_CAPTURE_SCALE,
    attention_workspace_gib=0.0,
    unitemized_gib=0.0,
    highest_fraction=0.99,
)
#: fits of measured startup peaks; docs/gpu-validation.md has each one's data and residuals
FITS: tuple[PostPoolFit, ...] = (FIT_0517,)


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
