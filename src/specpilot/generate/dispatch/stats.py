"""Live counters of a running job and how they are shown: rich on a TTY, else one line now and then.

In flight, retries, failed and the rates the progress line shows are the ledger's summary
(`report.summarize`), read after a flush: the same numbers the page, `/metrics` and
`report` show. These in-memory counters add what only the running process knows (per
server answers and latencies, causes of this run's retries) and cost nothing per request
beyond a few integer additions.
"""

from __future__ import annotations

import bisect
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from specpilot.generate.dispatch.causes import SERVER_DOWN, cause_of
from specpilot.generate.dispatch.servers import ServerPool
from specpilot.generate.ledger.report import eta_text

if TYPE_CHECKING:
    from specpilot.generate.ledger.report import JobSummary

#: a live table reads the ledger's summary at most this often
SUMMARY_EVERY_S = 2.0
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
    """What only this run knows: its answers per server and the causes of its retries
    (backoff retries and rows requeued from a server that went down) and failures."""

    done: int = 0
    failed: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    accept_length_sum: float = 0.0
    accept_length_rows: int = 0
    paused_reason: str | None = None
    retries_by_cause: Counter[str] = field(default_factory=Counter)
    failed_by_cause: Counter[str] = field(default_factory=Counter)
    #: rows of this run per flag (a row may carry several)
    flagged_by: Counter[str] = field(default_factory=Counter)
    servers: dict[str, ServerStats] = field(default_factory=dict)

    # The dispatcher reports each outcome through these (the status page and /metrics read them).

    def answered(self, server: str, latency_s: float, prompt_tokens: int, completion_tokens: int) -> None:
        self.done += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.servers.setdefault(server, ServerStats()).observe(latency_s, prompt_tokens, completion_tokens)

    def retried(self, error: str) -> None:
        self.retries_by_cause[cause_of(error)] += 1

    def requeued_from_down_server(self) -> None:
        self.retries_by_cause[SERVER_DOWN] += 1

    def row_failed(self, error: str) -> None:
        self.failed += 1
        self.failed_by_cause[cause_of(error)] += 1


def progress_numbers(summary: JobSummary, accept: float | None, pool: ServerPool) -> dict[str, str]:
    """What the progress line and table show: the ledger's summary, and which servers are down."""
    s = summary
    down = [server.name for server in pool.servers if not server.healthy]
    window = f"{s.rate_window_s:.0f} s"
    return {
        "done": f"{s.done}/{s.total}",
        f"rows/s ({window})": f"{s.rows_per_s:.1f}",
        f"out tok/s ({window})": f"{s.output_tokens_per_s:.0f}",
        "in flight": str(s.in_flight) + "".join(f" {name}:DOWN" for name in down),
        "retries": str(s.retries),
        "failed": str(s.failed),
        "flagged": flagged_text(Counter({flag: n for flag, n in s.flags.items() if n})),
        "accept len": "-" if accept is None else f"{accept:.2f}",
        "eta": eta_text(s.eta_s),
    }


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
        summary: Callable[[], JobSummary],
        *,
        interval_s: float,
        stream: TextIO | None = None,
    ) -> None:
        self._stats, self._pool, self._accept_length = stats, pool, accept_length
        self._read_summary = summary
        self._summary: JobSummary | None = None
        self._summary_at = -float("inf")
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
        """After a flush: the ledger holds what the job did up to now."""
        if self._live is not None:
            if time.monotonic() - self._summary_at >= SUMMARY_EVERY_S:
                self._summary = None
            self._live.update(self._table())
        elif time.monotonic() - self._last_line >= self._interval_s:
            self._last_line = time.monotonic()
            self._summary = None
            print(self.line(), file=self._stream, flush=True)

    def stop(self) -> None:
        if self._live is not None:
            self._summary = None
            self._live.update(self._table())
            self._live.stop()

    def _numbers(self) -> dict[str, str]:
        if self._summary is None:
            self._summary, self._summary_at = self._read_summary(), time.monotonic()
        return progress_numbers(self._summary, self._accept_length(), self._pool)

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
