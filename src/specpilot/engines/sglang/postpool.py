"""What a fit of SGLang's post-pool memory says: the shape of a release row's `post_pool_fit`.

Everything the engine allocates after its pools (graphs, activations, runtime buffers; before
0.5.14 the draft model) must fit in the reserve. A release without a fit has every term
estimated on the safe side, padded by the planner (`specpilot.plan.sglang.margin`). A fit
holds terms fitted to the lowest free memory measured during real starts of its release (NVML
samples on the log's phases, `plan --samples`), one stated margin in GiB with its reason, where
its starts lie (`FitRange`) and the larger margin a plan outside that range keeps. A fit sets
only the terms its data pins down; the others keep their estimates. The fit's peak is
phase-ordered: the prefill graph's capture transient comes before the decode-side graphs are
captured (`gpu/sglang/fit.py` prints the fit and its residuals).
"""

from __future__ import annotations

from dataclasses import dataclass

#: a card's size as the spec gives it, to the 0.05 GiB its reading is rounded to
CARD_SLACK_GIB = 0.05


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

    def outside(
        self, architecture: str, moe: bool, context_tokens: int, card_gib: float, tp_size: int = 1
    ) -> list[str]:
        """What of this plan lies outside the measured range, in words (empty: inside)."""
        found = []
        if architecture not in self.architectures:
            found.append(f"architecture {architecture}")
        if moe and not self.moe:
            found.append("MoE layers")
        if not self.context_tokens[0] <= context_tokens <= self.context_tokens[1]:
            found.append(f"context {context_tokens:,}")
        if not self.card_gib[0] - CARD_SLACK_GIB <= card_gib <= self.card_gib[1] + CARD_SLACK_GIB:
            found.append(f"a {card_gib:g} GiB card")
        if tp_size != self.tp_size:
            found.append(f"tensor parallel {tp_size}")
        return found


@dataclass(frozen=True)
class PostPoolFit:
    """Post-pool terms of one release row fitted to measured startup peaks (None: the
    estimate stays), and the margins the plan keeps beyond them."""

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
    #: attention backends' buffers, GiB
    attention_workspace_gib: float | None = None
    #: runtime buffers no term itemizes, GiB: where set, it replaces the row's estimate
    #: (`unitemized_hybrid_gib` / `unitemized_dense_gib`) and the plan's term says "fitted"
    unitemized_gib: float | None = None
    #: the highest --mem-fraction-static a recommendation may use (None: the estimates' ceiling)
    highest_fraction: float | None = None
    #: the prefill graph of a MoE model, per captured token per hidden unit per layer
    moe_prefill_graph_bytes_per_token_hidden_layer: float | None = None
    #: where the fit's starts lie (None: no stated range, the stated margin applies everywhere)
    valid: FitRange | None = None
    #: GiB a plan keeps free beyond the fit's terms outside `valid` (at least the stated margin)
    extrapolation_margin_gib: float = 0.0

    def margin_gib(self, extrapolating: bool) -> float:
        """The free memory a plan keeps beyond the fitted terms, inside or outside `valid`."""
        return (
            max(self.stated_margin_gib, self.extrapolation_margin_gib)
            if extrapolating
            else self.stated_margin_gib
        )
