"""A lower running-request cap projected from a screen at the largest one (`BatchRates.capped`)."""

from __future__ import annotations

import pytest

from specpilot.projection import BatchRates


def test_a_cap_between_two_measured_batch_sizes_runs_at_the_curve_s_rate_there() -> None:
    """The H200 search (2026-12-03): every answer 64 tokens long, so the screen's drain fell
    from 51 in flight straight to 1; caps 26 and 13 were then projected at one request's speed
    (11x slower than the curve between the two) and a cap of 60 of the plain configuration the
    same as 30."""
    screen = BatchRates(((51.0, 3200.0, 5.7), (1.0, 22.0, 1.0)), 51)
    full = screen.rate_at(26)
    assert screen.capped(26).rate_at(26) == pytest.approx(full)
    assert screen.capped(26).rate_at(13) == pytest.approx(screen.rate_at(13))
    assert screen.capped(26).rate_at(40) == pytest.approx(full)  # a cap is never passed
    assert screen.capped(13).rate_at(13) < screen.capped(26).rate_at(26) < screen.rate_at(51)
    assert screen.capped(26).largest == 26


def test_a_cap_at_or_above_what_was_measured_keeps_the_curve_as_it_is() -> None:
    screen = BatchRates(((48.0, 4800.0, 4.0), (24.0, 2000.0, 2.5), (6.0, 300.0, 1.0)), 50)
    assert screen.capped(64).points == screen.points
    assert screen.capped(64).rate_at(30) == pytest.approx(screen.rate_at(30))


def test_a_cap_below_the_smallest_batch_measured_keeps_its_speed_per_request() -> None:
    screen = BatchRates(((40.0, 4000.0, 4.0), (8.0, 640.0, 1.0)), 40)
    assert screen.capped(4).rate_at(4) == pytest.approx(640.0 / 8 * 4)
