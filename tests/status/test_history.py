"""History downsampling keeps rates exact; failure causes come from a bounded set."""

from __future__ import annotations

import math

import pytest

from specpilot.generate.dispatch.causes import cause_of
from specpilot.status.history import History, Sample
from specpilot.status.svg import line_chart


def _history(count: int, rows_per_s: tuple[float, float], *, max_samples: int = 200_000) -> History:
    history = History(["a", "b"], max_samples=max_samples)
    for i in range(count):
        accept = math.nan if i % 2 else 2.0 + (i % 4) / 2  # alternately unknown, 2.0 and 3.0
        history.record(
            Sample(
                float(i),
                tuple(int(rate * i) for rate in rows_per_s),
                tuple(int(10 * rate * i) for rate in rows_per_s),
                accept,
            )
        )
    return history


def test_rates_are_exact_whatever_the_downsampling() -> None:
    history = _history(100_000, (4.0, 0.5))
    fast = history.rate(0, "rows", 300)
    slow = history.rate(1, "completion_tokens", 300)
    assert len(fast) == len(slow) == 300
    assert all(value == pytest.approx(4.0, rel=1e-3) for _, value in fast)
    assert all(value == pytest.approx(5.0, rel=1e-3) for _, value in slow)
    assert fast[-1][0] == 99_999.0  # the newest sample is always plotted
    accept = history.accept_length(300)
    assert len(accept) == 300 and all(v == pytest.approx(2.5, abs=0.01) for _, v in accept)


def test_a_full_history_halves_its_resolution_not_its_span() -> None:
    history = _history(1001, (1.0, 1.0), max_samples=1000)
    assert len(history.samples) == 501
    assert (history.samples[0].time_s, history.samples[-1].time_s) == (0.0, 1000.0)
    assert history.rate(0, "rows", 10) == [(100.0 * k, pytest.approx(1.0)) for k in range(1, 11)]


def test_short_histories_plot_what_they_have() -> None:
    assert _history(1, (1.0, 1.0)).rate(0, "rows", 300) == []
    series = _history(5, (2.0, 1.0)).rate(0, "rows", 300)
    assert len(series) == 4
    svg = line_chart("rows", [("a", series), ("empty", [])])
    assert svg.count('class="series"') == 1 and 'data-points="4"' in svg
    assert "no data yet" in line_chart("rows", [("a", [])])


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        ('HTTP 429: {"error": "slow down"}', "http_429"),
        ("HTTP 503: upstream", "http_503"),
        ("request timed out after 1800 s", "timeout"),
        ("connection failed: ClientConnectorError: refused", "connection"),
        ("malformed response: <html>", "malformed_response"),
        ("something new", "other"),
        ("", "other"),
    ],
)
def test_causes(error: str, cause: str) -> None:
    assert cause_of(error) == cause
