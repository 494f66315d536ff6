"""What the SGLang plan keeps free after the pools: estimated terms with their 10% padding, or
terms fitted to measured startup peaks plus one stated margin (the release row's `post_pool_fit`,
`plan/sglang/margin.py`).

The fits here (but the last test's) are test fits on a real H200 start's spec (0.5.17, Qwen3.6-27B, 95.6 GiB card,
--context-length 32768, no speculation): they show what the code path does with a fit, not
what the engine measured (docs/gpu-validation.md has the real fits).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.engines.sglang.postpool import PostPoolFit
from specpilot.engines.sglang.releases import release_rules
from specpilot.plan import make_plan
from specpilot.plan.types import Plan
from specpilot.spec import Spec, load_spec
from tests.plan.fits import set_fit

H200 = Path(__file__).resolve().parents[1] / "data" / "startup_logs" / "sglang-h200"
#: the engine's printed prefill graph of Qwen3.6-27B: 2.85 GiB for 8192 x 5120 x 64
PRINTED_PREFILL_BYTES = 1.15
STATED = PostPoolFit(
    stated_margin_gib=0.5,
    margin_reason="test fit",
    source="tests",
    prefill_graph_bytes_per_token_hidden_layer=PRINTED_PREFILL_BYTES,
    decode_graph_family=(0.1, 0.5),
)


def _bare(run: str) -> Spec:
    """The start's spec without the knobs the plan recommends."""
    spec = load_spec(H200 / f"{run}.toml")
    args = spec.engine.args[: spec.engine.args.index("--mem-fraction-static")]
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": args})})


def _term_source(plan: Plan, prefix: str) -> str:
    return next(t.source for t in plan.terms if t.name.startswith(prefix))


def test_without_a_fit_every_post_pool_term_is_estimated_and_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert release_rules("0.5.13").post_pool_fit is None  # only 0.5.17 has a fit
    set_fit(monkeypatch, None)
    plan = make_plan(resolve(load_spec(H200 / "r17-plain-rec2-96.toml")))
    assert {_term_source(plan, p) for p in ("activations", "decode CUDA", "prefill CUDA", "runtime")} == {
        "estimated"
    }
    assert plan.details.margin_gib >= 0.1 * plan.reserve_needed_gib


def test_a_fit_replaces_the_terms_it_sets_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    set_fit(monkeypatch, None)
    estimated = make_plan(resolve(load_spec(H200 / "r17-plain-rec2-96.toml")))
    set_fit(monkeypatch, STATED)
    fitted = make_plan(resolve(load_spec(H200 / "r17-plain-rec2-96.toml")))
    assert _term_source(fitted, "prefill CUDA") == "fitted"
    assert _term_source(fitted, "decode CUDA") == "fitted"
    assert _term_source(fitted, "activations") == "estimated"
    assert _term_source(fitted, "runtime") == "estimated"
    prefill = {p.name: p.gib for p in (estimated, fitted) for p in p.terms if p.name.startswith("prefill")}
    assert len(prefill) == 1  # the same name; the value is the fitted one
    assert next(t.gib for t in fitted.terms if t.name.startswith("prefill")) == pytest.approx(
        8192 * 5120 * 64 * PRINTED_PREFILL_BYTES / 2**30
    )
    assert fitted.reserve_needed_gib < estimated.reserve_needed_gib
    # the pools do not move: the fit is about what comes after them
    assert fitted.kv_tokens == estimated.kv_tokens


def test_a_stated_margin_raises_concurrency_where_the_padding_was_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """95.6 GiB without speculation: the estimates stop at 0.93 (0.94 would leave about 0.2 GiB
    of the 0.7 the padding asks); the fitted terms and 0.5 GiB stated allow 0.94."""
    set_fit(monkeypatch, None)
    estimated = make_plan(resolve(_bare("r17-plain-rec2-96")))
    set_fit(monkeypatch, STATED)
    fitted = make_plan(resolve(_bare("r17-plain-rec2-96")))
    assert estimated.recommended_args[:2] == ["--mem-fraction-static", "0.93"]
    assert fitted.recommended_args[:2] == ["--mem-fraction-static", "0.94"]
    requests = [
        int(p.recommended_args[p.recommended_args.index("--max-running-requests") + 1])
        for p in (estimated, fitted)
    ]
    assert requests[1] > requests[0]
    assert "it keeps at least 0.50 GiB free: test fit" in fitted.notes[0]


def test_the_fraction_search_starts_at_the_fits_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """With estimates the search starts at 0.95; a fit may let it start higher, where the reserve
    the whole card leaves at 0.95 is more than the fitted terms and the stated margin need."""
    bare = _bare("r17-plain-rec2-96")
    spec = bare.model_copy(update={"gpu": bare.gpu.model_copy(update={"memory_gib": 139.8})})
    set_fit(monkeypatch, None)
    assert make_plan(resolve(spec)).recommended_args[1] == "0.95"
    set_fit(monkeypatch, STATED)
    assert (
        make_plan(resolve(spec)).recommended_args[1] == "0.95"
    )  # the fitted terms alone stop at the ceiling
    set_fit(monkeypatch, replace(STATED, highest_fraction=0.98))
    raised = make_plan(resolve(spec))
    assert float(raised.recommended_args[1]) > 0.95
    assert raised.details.margin_gib >= STATED.stated_margin_gib


def test_the_fit_is_its_release_rows_own_and_says_what_it_replaces() -> None:
    """0.5.17's fit is a field of its row, not inherited by the next; where it sets the
    unitemized buffers the term is the fit's and says so, not the row's estimate."""
    row = release_rules("0.5.17")
    assert row.post_pool_fit is not None and row.post_pool_fit.unitemized_gib == 0.0
    assert release_rules("0.5.18").post_pool_fit is None
    plan = make_plan(resolve(load_spec(H200 / "r17-plain-rec2-96.toml")))
    runtime = next(t for t in plan.terms if t.name.startswith("runtime"))
    assert (runtime.gib, runtime.source) == (0.0, "fitted") != (row.unitemized_hybrid_gib, "estimated")


def test_the_extrapolation_margin_is_the_rows_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the fit's range the plan keeps the margin the row's fit states for it."""
    fit = release_rules("0.5.17").post_pool_fit
    assert fit is not None
    spec = load_spec(H200 / "r17-plain-rec2-96.toml")
    spec = spec.model_copy(update={"gpu": spec.gpu.model_copy(update={"memory_gib": 47.6})})
    set_fit(monkeypatch, replace(fit, extrapolation_margin_gib=2.25))
    note = next(n for n in make_plan(resolve(spec)).notes if n.startswith("extrapolating"))
    assert "a 47.6 GiB card" in note and "2.25 GiB margin instead of 0.50" in note
