"""A point whose start runs past what is left of the bench budget names --budget-s, not the spec's
ready_timeout_s (the second H200 search, 2026-12-03: a 480 s budget left each screen 120 s; both
starts, on a fresh machine compiling kernels, were told to raise [server] ready_timeout_s, 500)."""

from __future__ import annotations

from specpilot.bench.measure import _failure
from specpilot.launch.outcome import UpResult

ENGINE_SAID = "not ready after 120 s (phase 'cuda_graph_capture'; raise [server] ready_timeout_s if this engine needs longer)"


def test_a_start_cut_by_the_budget_s_share_names_the_budget() -> None:
    reason = _failure(UpResult("search", "failed", "timeout", ENGINE_SAID), 120.0, 500.0)
    assert "what was left of the budget (120 s; the spec allows 500 s): raise --budget-s" in reason
    assert "ready_timeout_s" not in reason


def test_a_start_cut_by_the_spec_s_own_timeout_keeps_the_engine_s_words() -> None:
    reason = _failure(UpResult("search", "failed", "timeout", ENGINE_SAID), 900.0, 500.0)
    assert reason == f"did not start (failed, timeout): {ENGINE_SAID}"


def test_a_start_that_failed_otherwise_is_reported_as_it_failed() -> None:
    reason = _failure(UpResult("search", "failed", "oom", "CUDA out of memory"), 120.0, 500.0)
    assert reason == "did not start (failed, oom): CUDA out of memory"
