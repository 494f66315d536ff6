"""The acceptance length a job reports (dispatch/acceptance.py): the servers' metrics first,
the answers' own field without them."""

from __future__ import annotations

from typing import cast

import aiohttp

from specpilot.engines.registry import ENGINES
from specpilot.generate.dispatch.acceptance import AcceptanceWatch
from specpilot.generate.dispatch.servers import ServerPool
from specpilot.generate.dispatch.stats import LiveStats
from specpilot.generate.ledger.store import Ledger


def _watch(stats: LiveStats) -> AcceptanceWatch:
    session, ledger = cast(aiohttp.ClientSession, None), cast(Ledger, None)
    return AcceptanceWatch(session, ServerPool(["http://127.0.0.1:1"], 1), stats, ledger, 1.0)


def test_without_metrics_the_answers_acceptance_is_averaged() -> None:
    stats = LiveStats(accept_length_sum=5.0, accept_length_rows=2)
    assert _watch(stats).accept_length() == 2.5
    assert _watch(LiveStats()).accept_length() is None


def test_the_servers_metrics_win_over_the_answers() -> None:
    metric = next(m for engine in ENGINES for m in engine.spec_metrics if m.accepted and m.drafts)
    assert metric.accepted is not None and metric.drafts is not None
    watch = _watch(LiveStats(accept_length_sum=5.0, accept_length_rows=2))
    watch.spec.observe("s", {metric.accepted: 10.0, metric.drafts: 10.0})
    watch.spec.observe("s", {metric.accepted: 40.0, metric.drafts: 20.0})
    assert watch.accept_length() == 1.0 + 30.0 / 10.0
