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
from specpilot.models.shape import ModelShape

#: with estimated terms, the reserve must hold this many times their sum
ESTIMATED_MARGIN_RATIO = 1.10
#: with estimated terms, the highest --mem-fraction-static a recommendation may use: above it
#: the reserve is too small for the estimates' errors
ESTIMATED_HIGHEST_FRACTION = 0.95


@dataclass(frozen=True)
class FitRange:
    """Where a fit's starts lie: the model architectures (and whether any had MoE layers),
    the context lengths and the card sizes they ran at. A plan outside it extrapolates."""

    architectures: frozenset[str]
    moe: bool
    context_tokens: tuple[int, int]
    card_gib: tuple[float, float]
    #: every fitted start ran on one GPU: sharded weights, KV and state, and the all-reduce
    #: buffers of TP > 1 change what is left after the pools
    tp_size: int = 1

    def __str__(self) -> str:
        kind = "MoE" if self.moe else "dense-MLP"
        low, high = self.context_tokens
        context = f"{low:,}" if low == high else f"{low:,}-{high:,}"
        return (
            f"{'/'.join(sorted(self.architectures))} ({kind}), context {context} tokens, "
            f"cards {self.card_gib[0]:g}-{self.card_gib[1]:g} GiB, TP {self.tp_size}"
        )

    def outside(self, shape: ModelShape, context_tokens: int, card_gib: float, tp_size: int = 1) -> list[str]:
        """What of this plan lies outside the measured range, in words (empty: inside)."""
        found = []
        if shape.architecture not in self.architectures:
            found.append(f"architecture {shape.architecture}")
        if shape.is_moe and not self.moe:
            found.append("MoE layers")
        if not self.context_tokens[0] <= context_tokens <= self.context_tokens[1]:
            found.append(f"context {context_tokens:,}")
        # the card's size as the spec gives it, to the 0.05 GiB its reading is rounded to
        if not self.card_gib[0] - CARD_SLACK_GIB <= card_gib <= self.card_gib[1] + CARD_SLACK_GIB:
            found.append(f"a {card_gib:g} GiB card")
        if tp_size != self.tp_size:
            found.append(f"tensor parallel {tp_size}")
        return found


CARD_SLACK_GIB = 0.05
#: GiB a plan keeps free beyond a fit's terms outside the fit's range (`FitRange`): the largest
#: error seen on SGLang 0.5.17 starts the fit had not seen (H200, 2026-12-03): the prefill
#: graph of a hybrid MoE printed 2.22 GiB kept against 0.77 planned (1.45 GiB), and a context
#: of 4,096 tokens left 0.1 GiB at its low point against 1.62 promised (1.52 GiB) before the
#: captured sizes were the engine's own (`quantities.captured_prefill_tokens`)
EXTRAPOLATION_MARGIN_GIB = 1.5


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
    #: the prefill graph of a MoE model, per captured token per hidden unit per layer
    moe_prefill_graph_bytes_per_token_hidden_layer: float | None = None
    #: where the fit's starts lie (None: no stated range, the margin applies everywhere)
    valid: FitRange | None = None

    def covers(self, version: str) -> bool:
        base = Version(Version(version).base_version)
        return Version(self.first) <= base <= Version(self.last)


#: the fit's numbers as `gpu/sglang/fit.py` prints them (tests/plan/test_sglang_fit.py refits)
FIT_PREFILL_BYTES_PER_TOKEN_HIDDEN_LAYER = 1.227
FIT_DECODE_FAMILY = (0.375, 0.665)
FIT_CAPTURE_SCALE = 2.856
#: a hybrid MoE's breakable prefill graph: SGLang 0.5.17 on the H200 printed "Capture target
#: prefill CUDA graph end ... mem usage=2.22 GB" for a Qwen3.6-35B-A3B-shaped model (hidden
#: 2048, 40 MoE layers, 8,192 tokens captured) with MTP at context 32,768: 2.22 GiB / (8192 x
#: 2048 x 40). One start, outside the fit's range: it is planned with the extrapolation margin
FIT_MOE_PREFILL_BYTES_PER_TOKEN_HIDDEN_LAYER = 3.55
#: the 0.5.17 starts behind FIT_0517 and the plan it makes: the Qwen3.6-27B shape (text-only
#: and with its vision tower: the same prefill graph, 2.85-2.90 GiB printed) at context 8,192
#: with memory samples (tests/data/gpu-runs/sglang-0.5.17-h200-*) and 32,768 to 262,144 with
#: printed graph sizes, 2.84-2.90 GiB at every context (tests/data/startup_logs/sglang-h200/r17-*),
#: on cards of 79.6, 95.6 and 139.8 GiB.
#: The fitted terms do not read the context (the captured sizes are the engine's own), but the
#: range is where they were seen
FIT_0517_RANGE = FitRange(
    frozenset({"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"}), False, (8192, 262144), (79.6, 139.8)
)
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
    moe_prefill_graph_bytes_per_token_hidden_layer=FIT_MOE_PREFILL_BYTES_PER_TOKEN_HIDDEN_LAYER,
    valid=FIT_0517_RANGE,
)
#: fits of measured startup peaks; docs/gpu-validation.md has each one's data and residuals
FITS: tuple[PostPoolFit, ...] = (FIT_0517,)


def post_pool_fit(rules: SglangRelease) -> PostPoolFit | None:
    """The fit for a release row (a fit covers whole rows), None where its terms are estimated."""
    return next((fit for fit in FITS if fit.covers(rules.first) and fit.covers(rules.last)), None)


def required_margin_gib(fit: PostPoolFit | None, needed_gib: float, extrapolating: bool = False) -> float:
    """Free memory the plan keeps beyond the post-pool terms: the stated margin of a fit (at
    least `EXTRAPOLATION_MARGIN_GIB` outside its range), else the estimates' padding."""
    if fit is not None:
        return (
            max(fit.stated_margin_gib, EXTRAPOLATION_MARGIN_GIB) if extrapolating else fit.stated_margin_gib
        )
    return needed_gib * (ESTIMATED_MARGIN_RATIO - 1)


def highest_fraction(fit: PostPoolFit | None) -> float:
    """Where the recommendation's fraction search starts."""
    if fit is None or fit.highest_fraction is None:
        return ESTIMATED_HIGHEST_FRACTION
    return fit.highest_fraction
