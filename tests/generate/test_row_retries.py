"""What becomes of a row whose request failed (dispatch/retries.py), without a server: each
outcome lands in the ledger batch, the queue and the counters together."""

from __future__ import annotations

from specpilot.generate.dispatch.causes import SERVER_DOWN
from specpilot.generate.dispatch.client import FailureKind, RequestFailed
from specpilot.generate.dispatch.policy import RetryPolicy
from specpilot.generate.dispatch.retries import (
    FAILURES_BEFORE_SUCCESS_LIMIT,
    OVERLOAD_RETRIES_PER_ROW,
    RowRetries,
)
from specpilot.generate.dispatch.state import InFlight, RowQueue
from specpilot.generate.dispatch.stats import LiveStats
from specpilot.generate.rows.types import PromptRow

MAX_ATTEMPTS = 3


def _retries(rows: int = 1) -> tuple[RowRetries, list[str]]:
    queue = RowQueue(
        iter([PromptRow(p, f"r{p}", [[{"role": "user", "content": "q"}]]) for p in range(rows)]), rows
    )
    queue.refill()
    queue.ready.clear()  # every row is out: sent once
    stops: list[str] = []
    retry = RetryPolicy(max_attempts=MAX_ATTEMPTS, base_s=0.0, cap_s=0.0)
    return RowRetries(retry, queue, InFlight(), LiveStats(), stops.append), stops


def test_a_retryable_failure_is_retried_until_the_attempts_are_spent_then_failed() -> None:
    retries, stops = _retries()
    failure = RequestFailed(FailureKind.RETRYABLE, "HTTP 500: boom", status=500)
    for _ in range(MAX_ATTEMPTS - 1):
        retries.retry_or_fail(0, failure)
    batch = retries.take_batch()
    assert batch.retried == [("HTTP 500: boom", 0)] * (MAX_ATTEMPTS - 1) and batch.waiting == {0}
    assert [position for _, position in retries.queue.waiting] == [0] * (MAX_ATTEMPTS - 1)
    assert retries.stats.retries_by_cause == {"http_500": MAX_ATTEMPTS - 1}
    retries.retry_or_fail(0, failure)
    batch = retries.take_batch()
    assert batch.failed == [("HTTP 500: boom", 0)] and not batch.retried
    assert 0 not in retries.queue.rows and retries.stats.failed_by_cause == {"http_500": 1}
    assert stops == []


def test_a_fatal_failure_fails_the_row_at_once() -> None:
    retries, _ = _retries()
    retries.retry_or_fail(0, RequestFailed(FailureKind.FATAL, "HTTP 400: bad row", status=400))
    assert retries.take_batch().failed == [("HTTP 400: bad row", 0)]
    assert retries.requests.attempts == {0: 1}


def test_overloaded_answers_back_off_without_spending_an_attempt_up_to_their_limit() -> None:
    retries, _ = _retries()
    overloaded = RequestFailed(FailureKind.RETRYABLE, "HTTP 429: slow down", retry_after_s=None, status=429)
    for _ in range(OVERLOAD_RETRIES_PER_ROW):
        retries.retry_or_fail(0, overloaded)
    assert retries.requests.attempts == {} and retries.requests.overloads == {0: OVERLOAD_RETRIES_PER_ROW}
    assert len(retries.take_batch().retried) == OVERLOAD_RETRIES_PER_ROW
    retries.retry_or_fail(0, overloaded)  # past the limit: an attempt like any failure
    assert retries.requests.attempts == {0: 1}


def test_a_requeued_row_goes_first_and_spends_nothing() -> None:
    retries, _ = _retries(rows=2)
    retries.queue.ready.append(1)
    retries.requeue(0)
    assert list(retries.queue.ready) == [0, 1] and retries.requests.attempts == {}
    assert retries.take_batch().waiting == {0} and retries.stats.retries_by_cause == {SERVER_DOWN: 1}


def test_the_job_stops_when_its_first_rows_all_fail_and_not_once_one_was_done() -> None:
    retries, stops = _retries(rows=FAILURES_BEFORE_SUCCESS_LIMIT + 1)
    fatal = RequestFailed(FailureKind.FATAL, "HTTP 404: no such model", status=404)
    for position in range(FAILURES_BEFORE_SUCCESS_LIMIT - 1):
        retries.retry_or_fail(position, fatal)
    assert stops == []
    retries.retry_or_fail(FAILURES_BEFORE_SUCCESS_LIMIT - 1, fatal)
    assert stops == [
        f"the first {FAILURES_BEFORE_SUCCESS_LIMIT} rows all failed (last: HTTP 404: no such model); "
        "fix the cause, then rerun with --retry-failed"
    ]
    answered, stops = _retries(rows=FAILURES_BEFORE_SUCCESS_LIMIT)
    answered.stats.answered("s", 1.0, 1, 1)
    for position in range(FAILURES_BEFORE_SUCCESS_LIMIT):
        answered.retry_or_fail(position, fatal)
    assert stops == []


def test_a_started_row_leaves_the_waiting_set_of_the_same_batch() -> None:
    retries, _ = _retries()
    retries.requeue(0)
    retries.started(0)
    batch = retries.take_batch()
    assert (batch.started, batch.waiting) == ([0], set())
    assert retries.take_batch().started == []  # a new batch each time
