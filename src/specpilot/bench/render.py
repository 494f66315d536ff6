"""The bench's table (terminal) and chart (SVG): tok/s and acceptance per variant.

The chart follows `plan --svg`'s conventions (plain SVG, a <title> per shape, the numbers
as data attributes so a test or a script can read them back): one bar per variant for the
steady-state output tok/s on one scale, the acceptance length written under it, a
refused or failed variant drawn as an empty outline with its reason.
"""

from __future__ import annotations

from html import escape

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specpilot.bench.measure import Measured
from specpilot.bench.run import BenchResult
from specpilot.projection import wall_text

BAR_WIDTH_PX = 90
GAP_PX = 40
CHART_HEIGHT_PX = 260
TOP_PX, BOTTOM_PX, LEFT_PX = 44, 70, 16
COLOR_BAR = "#4e79a7"
COLOR_WINNER = "#59a14f"
COLOR_NONE = "#bbbbbb"


#: the table's columns; those holding text are left-aligned
COLUMNS = (
    "point",
    "search",
    "running",
    "preempted",
    "steady out tok/s",
    "accept",
    "TTFT p50/p99 ms",
    "ITL p50/p99 ms",
    "mean out",
    "projected job",
    "tail",
    "note",
)
TEXT_COLUMNS = ("point", "search", "note")


def _ms(values: dict[str, float] | None, key: str) -> str:
    return "-" if values is None else f"{values[key]:,.0f}"


def render_table(result: BenchResult, console: Console) -> None:
    table = Table(title=f"bench: {result.spec.name} on {result.spec.gpu.name or 'this GPU'}")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in TEXT_COLUMNS else "right")
    for row in result.variants:
        table.add_row(*_cells(row, result.winner))
    console.print(table)
    for line in result.axes:
        console.print(f"axis {line}")
    for line in result.notes:
        console.print(f"note: {line}")


def _cells(row: Measured, winner: str | None) -> list[str | Text]:
    """The point's row of the table: what it measured, or why it measured nothing."""
    if row.output_tokens_per_s is None:
        return _unmeasured_cells(row)
    won = row.label == winner
    return [
        Text(row.label + (" (winner)" if won else ""), style="bold green" if won else ""),
        row.search or row.status,
        str(row.max_running_requests),
        _shown(row.preemptions, ","),
        f"{row.output_tokens_per_s:,.0f}",
        _shown(row.accept_length, ".2f"),
        f"{_ms(row.ttft_ms, 'p50')}/{_ms(row.ttft_ms, 'p99')}",
        f"{_ms(row.itl_ms, 'p50')}/{_ms(row.itl_ms, 'p99')}",
        _shown(row.mean_output_tokens, ",.0f"),
        _projected(row),
        _shown(row.tail_share, ".1%"),
        row.basis or "",
    ]


def _unmeasured_cells(row: Measured) -> list[str | Text]:
    """A point that measured nothing: its cap, its projection (a predicted one) and why."""
    return [
        Text(row.label),
        row.search or row.status,
        str(row.max_running_requests or "-"),
        _shown(row.preemptions, ","),
        *["-"] * 5,
        _projected(row),
        _shown(row.tail_share, ".1%"),
        Text(row.reason or row.basis or "", style="yellow" if row.reason else ""),
    ]


def _shown(value: float | None, spec: str) -> str:
    """`value` in the format `spec`, "-" where it is not known."""
    return "-" if value is None else format(value, spec)


def _projected(row: Measured) -> str:
    """The whole job's projected time, marked where it is projected from another point's screen."""
    if row.projected_s is None:
        return "-"
    return wall_text(row.projected_s) + (" (predicted)" if row.predicted else "")


def winner_line(result: BenchResult) -> str:
    if result.winner is None:
        return result.verdict or "no point was measured: nothing to pick (the table says why)"
    best = next(r for r in result.variants if r.label == result.winner)
    gpus, servers = result.spec.gpu.count, int(result.data.get("servers", 1))
    # one server is measured; more side by side are projected from it (the layout axis)
    layout = f" (one measured, {servers} projected side by side)" if servers > 1 else ""
    return (
        f"winner: {best.label}: the whole input ({result.input_rows:,} rows x "
        f"{result.mean_output_tokens or 0:,.0f} output tokens) in "
        f"{wall_text(best.projected_s or 0.0)}{_tail_and_hours(best)} on "
        f"{_counted(servers, 'server')} of {_counted(gpus, 'GPU')}{layout} at "
        f"{best.max_running_requests} running requests, "
        f"{best.output_tokens_per_s or 0:,.0f} out tok/s steady"
    )


def _tail_and_hours(best: Measured) -> str:
    """The tail's share of the projected time and its GPU-hours, where known."""
    tail = "" if best.tail_share is None else f", {best.tail_share:.1%} of it the tail"
    hours = "" if best.gpu_hours is None else f", {best.gpu_hours:,.2f} GPU-hours"
    return tail + hours


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _bar(row: Measured, x: float, scale: float, winner: bool) -> list[str]:
    base_y = TOP_PX + CHART_HEIGHT_PX
    parts = [
        f'<text x="{x + BAR_WIDTH_PX / 2}" y="{base_y + 16}" text-anchor="middle" class="label">'
        f"{escape(row.label)}</text>"
    ]
    if row.output_tokens_per_s is None:
        parts.append(
            f'<rect class="variant" data-label="{escape(row.label)}" data-status="{escape(row.status)}" '
            f'x="{x}" y="{base_y - 30}" width="{BAR_WIDTH_PX}" height="30" fill="none" stroke="{COLOR_NONE}" '
            f'stroke-dasharray="4 2"><title>{escape(row.reason or row.status)}</title></rect>'
            f'<text x="{x + BAR_WIDTH_PX / 2}" y="{base_y + 32}" text-anchor="middle" fill="#999">'
            f"{escape(row.status)}</text>"
        )
        return parts
    height = row.output_tokens_per_s * scale
    accept = "-" if row.accept_length is None else f"{row.accept_length:.2f}"
    parts.append(
        f'<rect class="variant" data-label="{escape(row.label)}" '
        f'data-tokens-per-s="{row.output_tokens_per_s}" '
        f'data-accept-length="{accept}" x="{x}" y="{base_y - height:.1f}" width="{BAR_WIDTH_PX}" '
        f'height="{height:.1f}" fill="{COLOR_WINNER if winner else COLOR_BAR}">'
        f"<title>{escape(row.label)}: {row.output_tokens_per_s:,.0f} out tok/s, "
        f"acceptance {accept}</title></rect>"
        f'<text x="{x + BAR_WIDTH_PX / 2}" y="{base_y - height - 4:.1f}" text-anchor="middle">'
        f"{row.output_tokens_per_s:,.0f} tok/s</text>"
        f'<text x="{x + BAR_WIDTH_PX / 2}" y="{base_y + 32}" text-anchor="middle">accept {accept}</text>'
    )
    return parts


def render_svg(result: BenchResult) -> str:
    """Steady-state output tok/s per variant on one scale, acceptance under each bar."""
    rows = result.variants
    fastest = max((r.output_tokens_per_s or 0.0 for r in rows), default=0.0) or 1.0
    scale = (CHART_HEIGHT_PX - 20) / fastest
    width = LEFT_PX * 2 + len(rows) * (BAR_WIDTH_PX + GAP_PX)
    height = TOP_PX + CHART_HEIGHT_PX + BOTTOM_PX
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        "<defs><style>.title{font-size:13px;font-weight:bold}.label{font-weight:bold}</style></defs>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{LEFT_PX}" y="18" class="title">{escape(result.spec.name)}: steady-state output tok/s '
        "per variant</text>",
        f'<text x="{LEFT_PX}" y="34">{escape(winner_line(result))}</text>',
        f'<text x="{LEFT_PX}" y="{TOP_PX + CHART_HEIGHT_PX + BOTTOM_PX - 8}" class="legend" fill="#666">'
        "solid: measured at its own cap; outlined: predicted (projected from its configuration's screen, "
        "never a winner), refused, failed or not started</text>",
    ]
    for index, row in enumerate(rows):
        parts += _bar(row, LEFT_PX + index * (BAR_WIDTH_PX + GAP_PX), scale, row.label == result.winner)
    parts.append("</svg>")
    return "".join(parts)
