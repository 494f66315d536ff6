"""A fleet member's stall, read from its own /metrics: requests running and its generated-token
counter unchanged past the bound. A member busy the whole time but making progress, or idle, is
never called stalled; one whose counter restarts (a new process) starts its quiet time again."""

from __future__ import annotations

from pathlib import Path

from specpilot.engines.vllm.metrics import GENERATED_TOKENS, RUNNING_REQUESTS
from specpilot.fleet.spec import load_fleet
from specpilot.job.member_stalls import MemberStalls
from tests.fleet.conftest import FleetFactory, make_fleet  # noqa: F401  (fixtures used here)
from tests.launch.conftest import make_spec, run_home  # noqa: F401  (fixtures used here)

BOUND_S = 2.0


def scrape(tokens: float, running: float) -> dict[str, float]:
    return {GENERATED_TOKENS: tokens, RUNNING_REQUESTS: running}


def test_a_busy_member_making_progress_is_never_stalled_a_quiet_one_is(
    make_fleet: FleetFactory,  # noqa: F811
    run_home: Path,  # noqa: F811
) -> None:
    fleet = load_fleet(make_fleet([{"target": "local", "gpus": 2}], name="ms"))
    busy, hung = fleet.members
    stalls = MemberStalls(fleet)
    # every second for 30 s, both with requests running; the busy one's counter moves every 1.5 s
    said: dict[str, list[str]] = {busy.name: [], hung.name: []}
    for second in range(31):
        for member, tokens in ((busy, 10 + 8 * (second * 2 // 3)), (hung, 40)):
            why = stalls.observed(member, scrape(tokens, running=4), float(second), BOUND_S)
            if why is not None:
                said[member.name].append(why)
    assert said[busy.name] == []
    assert said[hung.name][0] == "no token progress for 3 s with 4 requests running (stall bound 2 s)"


def test_an_idle_member_or_one_that_restarted_is_not_stalled(
    make_fleet: FleetFactory,  # noqa: F811
    run_home: Path,  # noqa: F811
) -> None:
    fleet = load_fleet(make_fleet([{"target": "local", "gpus": 1}], name="ms"))
    member = fleet.members[0]
    stalls = MemberStalls(fleet)
    # idle: nothing runs, the counter stays
    assert [stalls.observed(member, scrape(40, running=0), float(s), BOUND_S) for s in range(10)] == [
        None
    ] * 10
    # its /metrics stops answering, then a new process counts from 0 with requests running
    assert stalls.observed(member, None, 10.0, BOUND_S) is None
    assert stalls.observed(member, scrape(0, running=2), 11.0, BOUND_S) is None
    assert stalls.observed(member, scrape(0, running=2), 13.0, BOUND_S) is None  # quiet 2 s: at the bound
    assert stalls.observed(member, scrape(0, running=2), 14.0, BOUND_S) is not None
    # no bound yet (nothing measured, no stall_after_s): never stalled
    assert stalls.observed(member, scrape(0, running=2), 100.0, None) is None
