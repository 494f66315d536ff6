"""Live counters of a running job and how they are shown: rich on a TTY, else one line now and then.

The numbers a user sees at the end (`--json`) and from `specpilot report` come from the
ledger (`report.py`); these in-memory counters only feed the live view, so the view
costs nothing per request beyond a few integer additions.
"""

from __future__ import annotations

import bisect
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from specpilot.generate.causes import SERVER_DOWN, cause_of
from specpilot.generate.servers import ServerPool

RATE_WINDOW_S = 60.0
#: upper bounds of the request latency histogram (LLM answers take from a second to many minutes)
LATENCY_BUCKETS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


@dataclass
class ServerStats:
    """One server's answers in this run: rows, tokens, and a latency histogram."""

    rows: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_sum_s: float = 0.0
    #: answers per latency bucket (LATENCY_BUCKETS_S, then one for slower), not cumulative
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))

    def observe(self, latency_s: float, prompt_tokens: int, completion_tokens: int) -> None:
        self.rows += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.latency_sum_s += latency_s
        self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_S, latency_s)] += 1


@dataclass
class LiveStats:
    """Counters of this run. "retries" shown = backoff retries + rows requeued from a
    server that went down, matching the ledger's count of requests sent again."""

    total: int
    done_before: int
    failed_before: int
    done: int = 0
    failed: int = 0
    retries: int = 0
    requeued: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    accept_length_sum: float = 0.0
    accept_length_rows: int = 0
    started_at: float = field(default_factory=time.monotonic)
    paused_reason: str | None = None
    retries_by_cause: Counter[str] = field(default_factory=Counter)
    failed_by_cause: Counter[str] = field(default_factory=Counter)
    #: rows of this run per flag (a row may carry several)
    flagged_by: Counter[str] = field(default_factory=Counter)
    servers: dict[str, ServerStats] = field(default_factory=dict)
    _samples: deque[tuple[float, int, int]] = field(default_factory=deque)

    # The dispatcher reports each outcome through these (the status page and /metrics read them).

    def answered(self, server: str, latency_s: float, prompt_tokens: int, completion_tokens: int) -> None:
        self.done += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.servers.setdefault(server, ServerStats()).observe(latency_s, prompt_tokens, completion_tokens)

    def retried(self, error: str) -> None:
        self.retries += 1
        self.retries_by_cause[cause_of(error)] += 1

    def requeued_from_down_server(self) -> None:
        self.requeued += 1
        self.retries_by_cause[SERVER_DOWN] += 1

    def row_failed(self, error: str) -> None:
        self.failed += 1
        self.failed_by_cause[cause_of(error)] += 1

    def sample(self) -> tuple[float, float]:
        """(rows/s, output tokens/s) over the last minute of this run."""
        now = time.monotonic()
        self._samples.append((now, self.done, self.completion_tokens))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        first = self._samples[0] if len(self._samples) > 1 else (self.started_at, 0, 0)
        elapsed = max(now - first[0], 1e-9)
        return (self.done - first[1]) / elapsed, (self.completion_tokens - first[2]) / elapsed

    def remaining(self) -> int:
        return max(self.total - self.done_before - self.failed_before - self.done - self.failed, 0)


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def flagged_text(flagged_by: Counter[str]) -> str:
    """`0`, or each flag of this run's rows with its count: `missing_reasoning 20, think_markers 20`."""
    return ", ".join(f"{flag} {count}" for flag, count in sorted(flagged_by.items())) or "0"


class ProgressView:
    """Refreshes a rich table on a TTY; elsewhere prints one summary line per interval."""

    def __init__(
        self,
        stats: LiveStats,
        pool: ServerPool,
        accept_length: Callable[[], float | None],
        *,
        interval_s: float,
        stream: TextIO | None = None,
    ) -> None:
        self._stats, self._pool, self._accept_length = stats, pool, accept_length
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._interval_s = interval_s
        self._last_line = time.monotonic()
        self._live: Live | None = None
        if self._tty:
            self._live = Live(
                self._table(), console=Console(file=self._stream), refresh_per_second=2, transient=False
            )
            self._live.start()

    def tick(self) -> None:
        if self._live is not None:
            self._live.update(self._table())
        elif time.monotonic() - self._last_line >= self._interval_s:
            self._last_line = time.monotonic()
            print(self.line(), file=self._stream, flush=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.stop()

    def _numbers(self) -> dict[str, str]:
        stats = self._stats
        rows_per_s, tokens_per_s = stats.sample()
        done = stats.done_before + stats.done
        eta = stats.remaining() / rows_per_s if rows_per_s > 0 else None
        accept = self._accept_length()
        in_flight = " ".join(
            f"{s.name}:{len(s.in_flight)}" if s.healthy else f"{s.name}:DOWN" for s in self._pool.servers
        )
        return {
            "done": f"{done}/{stats.total}",
            "rows/s": f"{rows_per_s:.1f}",
            "out tok/s": f"{tokens_per_s:.0f}",
            "in flight": in_flight,
            "retries": str(stats.retries + stats.requeued),
            "failed": str(stats.failed_before + stats.failed),
            "flagged": flagged_text(stats.flagged_by),
            "accept len": "-" if accept is None else f"{accept:.2f}",
            "eta": eta_text(eta),
        }

    def line(self) -> str:
        text = " | ".join(f"{key} {value}" for key, value in self._numbers().items())
        if self._stats.paused_reason:
            text += f" | PAUSED: {self._stats.paused_reason}"
        return text

    def _table(self) -> Table:
        table = Table(title="specpilot generate", show_header=False)
        for key, value in self._numbers().items():
            table.add_row(key, value)
        if self._stats.paused_reason:
            table.add_row("[bold red]PAUSED[/]", self._stats.paused_reason)
        return table

    def say(self, message: str) -> None:
        """A one-off event (server down/back): printed above the live view."""
        if self._live is not None:
            self._live.console.print(message)
        else:
            print(message, file=self._stream, flush=True)
