"""`launch/recovery.py`'s policy on its own: the budget decides between a start and giving up,
and the backoff doubles with each restart made."""

from __future__ import annotations

import asyncio

import pytest

from specpilot.check.resolved import resolve
from specpilot.launch import recovery
from specpilot.launch.recovery import Budget, Failure, Recovery, next_start
from specpilot.launch.server_plan import server_plan
from specpilot.spec import Spec
from tests.launch.conftest import SpecFactory


def _next(spec: Spec, failure: Failure, budget: Budget) -> Recovery:
    return asyncio.run(next_start(server_plan(resolve(spec)), failure, budget))


@pytest.mark.parametrize(("made", "backoff_s"), [(0, 2.0), (1, 4.0), (2, 8.0)])
def test_a_crash_restarts_the_same_spec_after_a_doubling_backoff(
    make_spec: SpecFactory, made: int, backoff_s: float
) -> None:
    spec = make_spec("sglang_ready")
    after = _next(
        spec, Failure("serving", "crash", "boom"), Budget(max_restarts=3, restarts=made, backoff_s=2.0)
    )
    assert (after.action, after.spec, after.backoff_s, after.change) == ("restart", spec, backoff_s, None)


def test_past_the_restarts_allowed_it_gives_up(make_spec: SpecFactory) -> None:
    after = _next(make_spec("sglang_ready"), Failure("serving", "stall", "no progress"), Budget(3, 3))
    assert (after.action, after.gave_up) == ("give_up", "max_restarts")


def test_a_start_oom_no_replan_may_answer_restarts_as_it_was_while_restarts_are_left(
    make_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fleet-repair allows restarts and no re-plan: the start is tried again as it was; `up`
    allows no restart: it gives up, saying the re-plan's why."""
    monkeypatch.setattr(recovery, "replan", lambda *args: pytest.fail("no re-plan was allowed"))
    spec = make_spec("sglang_ready")
    oom = Failure("start", "oom", "CUDA out of memory")
    assert _next(spec, oom, Budget(max_restarts=2)).action == "restart"
    gave_up = _next(spec, oom, Budget())
    assert (gave_up.action, gave_up.gave_up) == ("give_up", "off")
