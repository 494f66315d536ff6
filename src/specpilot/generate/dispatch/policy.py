"""What the dispatcher follows: the job's settings for sending rows, and how a row is retried."""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp

from specpilot.generate.dispatch.client import ChatClient
from specpilot.generate.sampling import Sampling

#: a task the job runs beside its requests (a watcher of the runs it drives), and its name
Companion = tuple[Coroutine[Any, Any, None], str]
#: makes the client the rows are sent with (ChatClient, or a subclass that also times them), from
#: the session, the model and the sampling
ClientFactory = Callable[[aiohttp.ClientSession, str, Sampling], ChatClient]


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_s: float
    cap_s: float

    def delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        """Full jitter over [0, min(cap, base * 2^(attempt-1))], at least the server's Retry-After."""
        delay_s = random.uniform(0.0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))
        if retry_after_s is not None:
            delay_s = max(delay_s, min(retry_after_s, self.cap_s))
        return delay_s


@dataclass(frozen=True)
class SettingNames:
    """Where the settings a stop names are given: generate's flags, or `specpilot job`'s keys."""

    stall_after_s: str = "--stall-after-s"
    give_up_after_s: str = "--give-up-after-s"
    concurrency: str = "--concurrency"


GENERATE_SETTING_NAMES = SettingNames()
#: the same settings in a job file (`specpilot job` runs generate with them)
JOB_SETTING_NAMES = SettingNames("[job] stall_after_s", "[job] give_up_after_s", "[job] concurrency")


@dataclass(frozen=True)
class DispatchPolicy:
    """The job settings the dispatcher follows."""

    concurrency: int  # requests in flight per server (per worker behind a router)
    keep_given_turns: bool
    retry: RetryPolicy
    request_timeout_s: float
    probe_timeout_s: float
    probe_cap_s: float
    give_up_after_s: float
    flush_interval_s: float
    flush_rows: int
    metrics_interval_s: float
    progress_interval_s: float | None  # None: no progress view
    #: no token progress this long with requests in flight is a stall (None: measured)
    stall_after_s: float | None = None
    #: how a stop names the settings above
    names: SettingNames = GENERATE_SETTING_NAMES
    #: an ending signal lets the requests in flight finish (a second stops at once); False: the
    #: signal is the command's (a bench ends at once, stopping its server)
    drain_on_signal: bool = True
