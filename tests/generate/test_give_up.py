"""When every server is down, the job keeps probing up to --give-up-after-s, or at most a minute
when no server has ever answered (a wrong address, not an outage)."""

from __future__ import annotations

from specpilot.generate.dispatch.health import NEVER_ANSWERED_GIVE_UP_S, give_up_reason


def test_an_outage_of_servers_that_worked_waits_the_whole_give_up_time() -> None:
    assert give_up_reason(3599.0, 3600.0, never_answered=False) is None
    reason = give_up_reason(3601.0, 3600.0, never_answered=False)
    assert reason is not None and reason.startswith("every server was down for 3600 s (--give-up-after-s)")


def test_servers_that_never_answered_give_up_after_a_minute() -> None:
    assert give_up_reason(NEVER_ANSWERED_GIVE_UP_S - 1, 3600.0, never_answered=True) is None
    reason = give_up_reason(NEVER_ANSWERED_GIVE_UP_S + 1, 3600.0, never_answered=True)
    assert reason is not None and reason.startswith("no server has answered since the job started (60 s)")


def test_a_shorter_give_up_time_holds_for_servers_that_never_answered_too() -> None:
    assert give_up_reason(11.0, 10.0, never_answered=True) == (
        "no server has answered since the job started (10 s); check the --server / --run addresses "
        "and that the servers are up"
    )
