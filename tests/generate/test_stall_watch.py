"""The stall bound: measured from the request times seen (at least a floor), or as given; a
server's answers and its /metrics token counter are its progress."""

from __future__ import annotations

import asyncio

from specpilot.generate.dispatch.servers import Server, observe_tokens
from specpilot.generate.dispatch.watchdog import STALL_FACTOR, STALL_FLOOR_S, StallWatch


def _busy(progress_at: float = 0.0) -> Server:
    server = Server("http://127.0.0.1:1", progress_at=progress_at)
    # a request out, never answered (a loop of its own: other tests may have closed the current one)
    loop = asyncio.new_event_loop()
    server.in_flight[0] = loop.create_future()  # type: ignore[assignment]
    loop.close()
    return server


def test_nothing_measured_is_no_bound_the_request_timeout_alone() -> None:
    assert StallWatch(None).stalled(10_000.0, _busy(), {0: 0.0}) is None


def test_the_measured_bound_is_a_multiple_of_the_p99_request_time_and_at_least_the_floor() -> None:
    watch = StallWatch(None)
    for _ in range(200):
        watch.took(1.0)
    assert watch.bound_s() == STALL_FLOOR_S
    for _ in range(3):
        watch.took(100.0)  # 3 of 203 answers took 100 s: more than 1 %, so the p99
    assert watch.bound_s() == STALL_FACTOR * 100.0


def test_a_busy_server_quiet_past_the_bound_is_stalled_and_says_how_long() -> None:
    watch = StallWatch(5.0)
    assert watch.stalled(104.0, _busy(progress_at=100.0), {0: 90.0}) is None
    why = watch.stalled(106.0, _busy(progress_at=100.0), {0: 90.0})
    assert why == "no token progress for 6 s with 1 requests in flight (stall bound 5 s: --stall-after-s)"


def test_an_idle_server_or_a_request_sent_just_now_is_no_stall() -> None:
    watch = StallWatch(5.0)
    assert watch.stalled(1000.0, Server("http://127.0.0.1:1"), {}) is None
    assert watch.stalled(1000.0, _busy(progress_at=0.0), {0: 999.0}) is None  # quiet since it was sent


def test_the_token_counter_moving_is_progress() -> None:
    server = _busy()
    observe_tokens(server, {"vllm:generation_tokens_total": 10.0}, 50.0)
    assert server.progress_at == 0.0  # the first scrape is the baseline
    observe_tokens(server, {"vllm:generation_tokens_total": 10.0}, 60.0)
    assert server.progress_at == 0.0  # the same count: no progress
    observe_tokens(server, {"vllm:generation_tokens_total": 18.0}, 70.0)
    assert server.progress_at == 70.0
    assert StallWatch(5.0).stalled(74.0, server, {0: 0.0}) is None


def test_a_bound_under_a_second_apart_is_said_as_given_and_a_jobs_key_is_named() -> None:
    """A bound of 1.5 s was said as '2 s' (rounded), and a job's bound named generate's flag."""
    watch = StallWatch(1.5, "[job] stall_after_s")
    assert watch.stalled(101.4, _busy(progress_at=100.0), {0: 90.0}) is None
    why = watch.stalled(101.7, _busy(progress_at=100.0), {0: 90.0})
    assert (
        why
        == "no token progress for 1.7 s with 1 requests in flight (stall bound 1.5 s: [job] stall_after_s)"
    )
