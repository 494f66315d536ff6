"""`/metrics`: the job in Prometheus' text format, built by `prometheus_client`.

Names follow https://prometheus.io/docs/practices/naming/: the `specpilot_` prefix,
`_total` on counters only, base units in the name (`_seconds`). Job-wide numbers come
from the ledger (so they survive restarts: tokens and done rows only grow); per-server
in-flight requests, latencies and retries by cause are this process's and exist only
while a job runs with `--serve-status`. A registry per page server, not the global one,
so nothing else in the process leaks into the output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import accumulate

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from specpilot.generate.dispatch.stats import LATENCY_BUCKETS_S
from specpilot.status.ledger_view import LedgerSnapshot
from specpilot.status.live import LiveView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def job_metrics(snapshot: LedgerSnapshot, live: LiveView | None) -> Iterator[Metric]:
    s = snapshot.summary
    rows = GaugeMetricFamily("specpilot_rows", "Rows of the job by ledger state.", labels=["state"])
    for state, count in (
        ("done", s.done),
        ("failed", s.failed),
        ("pending", s.pending),
        ("in_flight", s.in_flight),
    ):
        rows.add_metric([state], count)
    yield rows
    yield CounterMetricFamily("specpilot_rows_done", "Rows answered and committed (whole job).", value=s.done)
    yield CounterMetricFamily(
        "specpilot_prompt_tokens", "Prompt tokens of done rows (whole job).", value=s.prompt_tokens
    )
    yield CounterMetricFamily(
        "specpilot_completion_tokens",
        "Completion tokens of done rows (whole job).",
        value=s.completion_tokens,
    )
    # the same numbers as the page, `report` and the progress line (`report.summarize`)
    yield CounterMetricFamily(
        "specpilot_requests_resent",
        "Requests sent again (retries, and rows requeued from a server that went down; whole job).",
        value=s.retries,
    )
    yield GaugeMetricFamily(
        "specpilot_rows_per_second", "Rows finished per second over the rate window.", value=s.rows_per_s
    )
    yield GaugeMetricFamily(
        "specpilot_output_tokens_per_second",
        "Completion tokens per second over the rate window.",
        value=s.output_tokens_per_s,
    )
    yield GaugeMetricFamily(
        "specpilot_rate_window_seconds", "The window the per-second rates are over.", value=s.rate_window_s
    )
    failed = GaugeMetricFamily(
        "specpilot_failed_rows", "Failed rows by cause of the last error.", labels=["cause"]
    )
    for cause, count in snapshot.failed_by_cause.items():
        failed.add_metric([cause], count)
    yield failed
    flagged = GaugeMetricFamily("specpilot_flagged_rows", "Done rows carrying each flag.", labels=["flag"])
    for flag, count in s.flags.items():
        flagged.add_metric([flag], count)
    yield flagged
    eta_s = 0.0 if s.pending + s.in_flight == 0 else s.eta_s
    if eta_s is not None:  # unknown while nothing has finished in the last minute
        yield GaugeMetricFamily("specpilot_eta_seconds", "Estimated time to finish.", value=eta_s)
    accept = live.accept_length if live is not None else s.spec_accept_length
    if accept is not None:
        yield GaugeMetricFamily(
            "specpilot_spec_accept_length",
            "Mean tokens accepted per speculative verify pass.",
            value=accept,
        )
    if live is not None:
        yield from _live_metrics(live)


def _live_metrics(live: LiveView) -> Iterator[Metric]:
    retries = CounterMetricFamily(
        "specpilot_retries", "Requests sent again in this run, by cause.", labels=["cause"]
    )
    for cause, count in live.retries_by_cause.items():
        retries.add_metric([cause], count)
    yield retries
    up = GaugeMetricFamily("specpilot_server_up", "1 while the server is in rotation.", labels=["server"])
    in_flight = GaugeMetricFamily(
        "specpilot_server_in_flight_requests", "Requests in flight to the server.", labels=["server"]
    )
    latency = HistogramMetricFamily(
        "specpilot_request_duration_seconds",
        "Time from sending a request to its answer per answered row of this run (a multi-turn row: summed).",
        labels=["server"],
    )
    for server in live.servers:
        up.add_metric([server.name], 1 if server.up else 0)
        in_flight.add_metric([server.name], server.in_flight)
        answers = server.answers
        cumulative = list(accumulate(answers.latency_counts))
        bounds = [f"{b:g}" for b in LATENCY_BUCKETS_S] + ["+Inf"]
        latency.add_metric(
            [server.name], list(zip(bounds, cumulative, strict=True)), sum_value=answers.latency_sum_s
        )
    yield from (up, in_flight, latency)


class _JobCollector(Collector):
    def __init__(self, read: Callable[[], tuple[LedgerSnapshot, LiveView | None]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        yield from job_metrics(*self._read())


def exposition(snapshot: LedgerSnapshot, live: LiveView | None) -> bytes:
    """The text a Prometheus scrape of `/metrics` gets."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_JobCollector(lambda: (snapshot, live)))
    return generate_latest(registry)
