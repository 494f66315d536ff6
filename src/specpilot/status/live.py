"""What a running job adds to the ledger's numbers: servers, in-flight work, latencies, history.

The job is read through a narrow protocol (the dispatcher's `stats`, `pool` and
`accept_length`), so the status page needs nothing else from the generate code.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Protocol

from specpilot.generate.dispatch.servers import ServerPool
from specpilot.generate.dispatch.stats import LiveStats, ServerStats
from specpilot.status.history import History, Sample

SAMPLE_INTERVAL_S = 1.0
_USERINFO = re.compile(r"^[^@/]*@")


def display_name(server: str) -> str:
    """A server as shown and exported: `user:password@` dropped from its address."""
    return _USERINFO.sub("", server.split("://", 1)[-1])


class LiveJob(Protocol):
    """The part of a running generate job the status page reads."""

    @property
    def stats(self) -> LiveStats: ...

    @property
    def pool(self) -> ServerPool: ...

    def accept_length(self) -> float | None: ...


@dataclass(frozen=True)
class ServerView:
    name: str
    up: bool
    in_flight: int
    answers: ServerStats


@dataclass(frozen=True)
class LiveView:
    servers: list[ServerView]
    retries_by_cause: dict[str, int]
    failed_by_cause: dict[str, int]
    paused_reason: str | None
    accept_length: float | None
    history: History


class LiveRecorder:
    """Samples a running job into its history and turns it into a `LiveView`."""

    def __init__(self, job: LiveJob) -> None:
        self.job = job
        self.history = History([display_name(s.name) for s in job.pool.servers])

    def sample(self, now_s: float | None = None) -> None:
        stats = self.job.stats
        per_server = [stats.servers.get(s.name, ServerStats()) for s in self.job.pool.servers]
        accept = self.job.accept_length()
        self.history.record(
            Sample(
                time_s=time.time() if now_s is None else now_s,
                rows=tuple(s.rows for s in per_server),
                completion_tokens=tuple(s.completion_tokens for s in per_server),
                accept_length=math.nan if accept is None else accept,
            )
        )

    def view(self) -> LiveView:
        stats = self.job.stats
        return LiveView(
            servers=[
                ServerView(
                    display_name(s.name),
                    s.healthy,
                    len(s.in_flight),
                    stats.servers.get(s.name, ServerStats()),
                )
                for s in self.job.pool.servers
            ],
            retries_by_cause=dict(stats.retries_by_cause.most_common()),
            failed_by_cause=dict(stats.failed_by_cause.most_common()),
            paused_reason=stats.paused_reason,
            accept_length=self.job.accept_length(),
            history=self.history,
        )
