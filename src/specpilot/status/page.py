"""The status page: one self-contained HTML document, refreshed by the browser every few seconds.

It shows prompt ids, counts and error texts, never a prompt's or an answer's text (the
ledger does not hold them, and the page reads nothing else). Numbers that tests and
people compare with `specpilot report` carry stable element ids (`rows-done`, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

from specpilot.generate.ledger.report import eta_text
from specpilot.status.history import Series
from specpilot.status.ledger_view import LedgerSnapshot
from specpilot.status.live import LiveView, display_name
from specpilot.status.svg import bar_chart, line_chart

REFRESH_S = 5
PLOT_POINTS = 300
ERROR_CHARS = 160

STYLE = """
body{font:14px system-ui,sans-serif;margin:16px;color:#222;max-width:1340px}
h1{font-size:18px;margin:0 0 8px}h2{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:flex;flex-wrap:wrap;gap:8px 24px}.muted{fill:#888;color:#888}
.bar-outer{width:640px;height:14px;background:#eee}.bar-inner{height:14px;background:#2ca02c}
svg text{font:11px system-ui,sans-serif;fill:#444}.axis{stroke:#999}
.down{color:#c00;font-weight:bold}.paused{background:#fee;padding:6px;border:1px solid #c00}
"""


@dataclass(frozen=True)
class PageInput:
    title: str
    snapshot: LedgerSnapshot
    live: LiveView | None


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, table_id: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{value}</td>'
            if isinstance(value, int | float)
            else f"<td>{escape(str(value))}</td>"
            for value in row
        )
        + "</tr>"
        for row in rows
    )
    return f'<table id="{table_id}"><tr>{head}</tr>{body or "<tr><td>none</td></tr>"}</table>'


def _headline(snapshot: LedgerSnapshot, live: LiveView | None) -> str:
    s = snapshot.summary
    accept = live.accept_length if live is not None else s.spec_accept_length
    finished = s.done + s.failed
    percent = 100.0 * finished / s.total if s.total else 0.0
    numbers = [
        ("rows-done", "done", s.done),
        ("rows-failed", "failed", s.failed),
        ("rows-pending", "pending", s.pending),
        ("rows-in-flight", "in flight", s.in_flight),
        ("rows-total", "total", s.total),
        ("retries", "retries (requests sent again)", s.retries),
        ("prompt-tokens", "tokens in", s.prompt_tokens),
        ("completion-tokens", "tokens out", s.completion_tokens),
        ("rows-per-s", f"rows/s (last {s.rate_window_s:.0f} s)", f"{s.rows_per_s:.2f}"),
        ("tokens-per-s", f"output tok/s (last {s.rate_window_s:.0f} s)", f"{s.output_tokens_per_s:.0f}"),
        ("eta", "ETA", eta_text(s.eta_s) if s.eta_s else "-"),
        ("accept-length", "spec accept length", "-" if accept is None else f"{accept:.2f}"),
    ]
    cells = "".join(
        f'<tr><td>{escape(label)}</td><td class="n" id="{key}">{value}</td></tr>'
        for key, label, value in numbers
    )
    bar = (
        f'<div class="bar-outer" title="{percent:.1f}%"><div class="bar-inner" '
        f'style="width:{percent:.2f}%"></div></div><div id="progress">{percent:.1f}% of rows finished</div>'
    )
    return f'<table id="numbers">{cells}</table>{bar}'


def _throughput(snapshot: LedgerSnapshot) -> tuple[Series, Series]:
    """Whole-job rows/s and output tok/s per ledger time bucket."""
    width_s = snapshot.throughput_bucket_s
    rows = [(t + width_s, n / width_s) for t, n, _ in snapshot.throughput]
    tokens = [(t + width_s, k / width_s) for t, _, k in snapshot.throughput]
    return rows, tokens


def _servers(snapshot: LedgerSnapshot, live: LiveView | None) -> str:
    if live is None:
        names = [display_name(url) for url in snapshot.servers]
        return _table(
            ["server", "state"],
            [(name, "not watched (this view reads the ledger only)") for name in names],
            table_id="servers",
        )
    rows = []
    for server in live.servers:
        answers = server.answers
        mean_s = answers.latency_sum_s / answers.rows if answers.rows else 0.0
        rows.append(
            (
                server.name,
                "up" if server.up else "DOWN",
                server.in_flight,
                answers.rows,
                answers.completion_tokens,
                f"{mean_s:.2f}",
            )
        )
    return _table(
        ["server", "state", "in flight", "rows (this run)", "output tokens", "mean latency s"],
        rows,
        table_id="servers",
    )


def render_page(page: PageInput, *, now_s: float | None = None) -> str:
    now_s = time.time() if now_s is None else now_s
    sections = [
        *_heading(page, now_s),
        *_charts(page.snapshot, page.live),
        *_tables(page.snapshot, page.live),
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        f"<title>specpilot: {escape(page.title)}</title><style>{STYLE}</style></head><body>"
        + "".join(sections)
        + f'<p class="muted">refreshes every {REFRESH_S} s · <a href="/metrics">/metrics</a></p>'
        "</body></html>"
    )


def _heading(page: PageInput, now_s: float) -> list[str]:
    """The page's title and state, its source and time, a pause, and the headline numbers."""
    snapshot, live = page.snapshot, page.live
    s = snapshot.summary
    paused = (
        f'<p class="paused" id="paused">PAUSED: {escape(live.paused_reason)}</p>'
        if live is not None and live.paused_reason
        else ""
    )
    return [
        f"<h1>specpilot generate: {escape(page.title)} ({escape(s.state)})</h1>",
        f"<div>model {escape(str(s.model))} · thinking {s.thinking} · "
        f"{'live' if live is not None else 'read from the ledger'} · "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(now_s))} UTC</div>",
        paused,
        _headline(snapshot, live),
    ]


def _charts(snapshot: LedgerSnapshot, live: LiveView | None) -> list[str]:
    """The grid of charts: rows/s and output tok/s (all servers, and each live one), the
    acceptance length, the output length histogram."""
    row_lines, token_lines = _rate_lines(snapshot, live)
    return [
        '<div class="grid"><div><h2>rows/s over time</h2>',
        line_chart("rows per second", row_lines),
        "</div><div><h2>output tok/s over time</h2>",
        line_chart("output tokens per second", token_lines),
        "</div><div><h2>spec acceptance length over time</h2>",
        _accept_chart(live),
        "</div><div><h2>output length (completion tokens, done rows)</h2>",
        _lengths_chart(snapshot),
        "</div></div>",
    ]


def _rate_lines(
    snapshot: LedgerSnapshot, live: LiveView | None
) -> tuple[list[tuple[str, Series]], list[tuple[str, Series]]]:
    """The rows/s and output tok/s lines: the ledger's for all servers, then each live server's."""
    rows_series, tokens_series = _throughput(snapshot)
    row_lines: list[tuple[str, Series]] = [("all servers (ledger)", rows_series)]
    token_lines: list[tuple[str, Series]] = [("all servers (ledger)", tokens_series)]
    if live is not None:
        history = live.history
        for index, name in enumerate(history.servers):
            row_lines.append((name, history.rate(index, "rows", PLOT_POINTS)))
            token_lines.append((name, history.rate(index, "completion_tokens", PLOT_POINTS)))
    return row_lines, token_lines


def _accept_chart(live: LiveView | None) -> str:
    if live is None:
        return line_chart(
            "spec acceptance length",
            [],
            empty="acceptance length over time is recorded by a live job (generate --serve-status)",
        )
    return line_chart(
        "spec acceptance length",
        [("mean accepted tokens per verify pass", live.history.accept_length(PLOT_POINTS))],
        empty="no acceptance length reported by the servers yet",
    )


def _lengths_chart(snapshot: LedgerSnapshot) -> str:
    width = snapshot.length_bucket_tokens
    return bar_chart(
        "output length histogram",
        [
            (f"{low} tok" if width == 1 else f"{low}-{low + width - 1} tok", count)
            for low, count in snapshot.length_histogram
        ],
    )


def _tables(snapshot: LedgerSnapshot, live: LiveView | None) -> list[str]:
    """The servers, retries and failures by cause, flags, and the last flagged and failed rows."""
    retries = live.retries_by_cause if live is not None else snapshot.retrying_by_cause
    retries_title = "retries by cause (this run)" if live is not None else "rows waiting to retry, by cause"
    failed_rows = [
        (row_id, attempts, cause, error[:ERROR_CHARS]) for row_id, attempts, cause, error in snapshot.failed
    ]
    return [
        "<h2>servers</h2>",
        _servers(snapshot, live),
        '<div class="grid"><div>',
        f"<h2>{escape(retries_title)}</h2>",
        _table(["cause", "count"], retries.items(), table_id="retries-by-cause"),
        "</div><div><h2>failed rows by cause</h2>",
        _table(["cause", "rows"], snapshot.failed_by_cause.items(), table_id="failed-by-cause"),
        "</div><div><h2>flags (done rows)</h2>",
        _table(["flag", "rows"], snapshot.summary.flags.items(), table_id="flags"),
        "</div></div>",
        "<h2>recently flagged rows</h2>",
        _table(["id", "flags"], [(i, ", ".join(f)) for i, f in snapshot.flagged], table_id="flagged"),
        "<h2>failed rows (last)</h2>",
        _table(["id", "attempts", "cause", "error"], failed_rows, table_id="failed"),
    ]
