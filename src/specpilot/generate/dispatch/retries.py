"""What becomes of a row whose request failed: backed off, retried, sent again, or failed.

Each outcome goes into the ledger batch the next flush commits, the in-memory queue and the
live counters, in that order of truth: the ledger decides what a rerun sends again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from specpilot.generate.dispatch.client import FailureKind, RequestFailed
from specpilot.generate.dispatch.policy import RetryPolicy
from specpilot.generate.dispatch.state import InFlight, RowQueue
from specpilot.generate.dispatch.stats import LiveStats
from specpilot.generate.ledger.store import LedgerBatch

FAILURES_BEFORE_SUCCESS_LIMIT = 50
#: 429 and 503 "overloaded" answers a row may back off from without spending an attempt
OVERLOAD_RETRIES_PER_ROW = 20
#: the statuses that say "slow down", not "this row is bad"
OVERLOAD_STATUSES = frozenset({429, 503})
#: an overloaded row's backoff grows as an attempt's would, up to this attempt's
OVERLOAD_BACKOFF_MAX_STEP = 8


class RowRetries:
    """The per-row retry and give-up policy, and the ledger batch its outcomes go into."""

    def __init__(
        self,
        retry: RetryPolicy,
        queue: RowQueue,
        requests: InFlight,
        stats: LiveStats,
        stop: Callable[[str], None],
    ) -> None:
        """`stop(reason)`: end the job (the first rows all failed)."""
        self.retry, self.queue, self.requests, self.stats, self._stop = retry, queue, requests, stats, stop
        self.batch = LedgerBatch.empty()

    def take_batch(self) -> LedgerBatch:
        """The changes since the last call, for the ledger; a new batch collects the next."""
        batch, self.batch = self.batch, LedgerBatch.empty()
        return batch

    def started(self, position: int) -> None:
        self.batch.started.append(position)
        self.batch.waiting.discard(position)

    def requeue(self, position: int) -> None:
        """Send the row again first, no attempt spent: its server went down, not the row."""
        self.batch.waiting.add(position)
        self.stats.requeued_from_down_server()
        self.queue.ready.appendleft(position)

    def retry_or_fail(self, position: int, failure: RequestFailed, *, elsewhere: bool = False) -> None:
        """The row's attempt failed: back off (overloaded), retry later, or fail it for good.
        `elsewhere`: another server takes requests now, so an overloaded row goes there at once."""
        overloads = self.requests.overloads.get(position, 0)
        if failure.status in OVERLOAD_STATUSES and overloads < OVERLOAD_RETRIES_PER_ROW:
            # "slow down", not "this row is bad": back off (at least Retry-After), no attempt spent
            self.requests.overloads[position] = overloads + 1
            step = min(overloads + 1, OVERLOAD_BACKOFF_MAX_STEP)
            delay_s = 0.0 if elsewhere else self.retry.delay_s(step, failure.retry_after_s)
            self._retry_later(position, failure, delay_s)
            return
        attempts = self.requests.attempts[position] = self.requests.attempts.get(position, 0) + 1
        if failure.kind is FailureKind.FATAL or attempts >= self.retry.max_attempts:
            self._fail(position, failure)
            return
        self._retry_later(position, failure, self.retry.delay_s(attempts, failure.retry_after_s))

    def _retry_later(self, position: int, failure: RequestFailed, delay_s: float) -> None:
        self.batch.retried.append((str(failure), position))  # a request made, spent or not
        self.batch.waiting.add(position)
        self.stats.retried(str(failure))
        self.queue.retry_at(time.monotonic() + delay_s, position)

    def _fail(self, position: int, failure: RequestFailed) -> None:
        self.batch.failed.append((str(failure), position))
        del self.queue.rows[position]
        self.requests.forget(position)
        self.stats.row_failed(str(failure))
        if self.stats.done == 0 and self.stats.failed >= FAILURES_BEFORE_SUCCESS_LIMIT:
            # A wrong --model or a broken server fails every row the same way; stop
            # before the whole input is marked failed.
            self._stop(
                f"the first {self.stats.failed} rows all failed (last: "
                f"{failure}); fix the cause, then rerun with --retry-failed"
            )
