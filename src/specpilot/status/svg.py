"""Plots as inline SVG, drawn on the server: no script, no external asset, readable offline.

Callers pass already downsampled series (a few hundred points), so a page stays small
whatever the length of the history. Every series is a `<polyline class="series">` whose
`data-points` attribute says how many points it has, for tests and for people reading
the page source.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from html import escape

from specpilot.status.history import Series

WIDTH_PX, HEIGHT_PX = 640, 200
PAD_LEFT_PX, PAD_RIGHT_PX, PAD_TOP_PX, PAD_BOTTOM_PX = 56, 12, 12, 24
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _number(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _clock(unix_s: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(unix_s))


def _empty(title: str, why: str) -> str:
    return (
        f'<svg class="chart" role="img" width="{WIDTH_PX}" height="{HEIGHT_PX // 2}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        f'<text x="8" y="24" class="muted">{escape(why)}</text></svg>'
    )


def line_chart(title: str, series: Sequence[tuple[str, Series]], *, empty: str = "no data yet") -> str:
    """Lines over time (x: UTC clock), one color per named series, y from 0."""
    drawn = [(name, points) for name, points in series if points]
    if not drawn:
        return _empty(title, empty)
    left, right, top = _extent(drawn)
    at = _scale(left, (right - left) or 1.0, top)
    parts = _line_axes(title, left, right, top)
    for index, (name, points) in enumerate(drawn):
        parts += _line(index, name, points, at)
    parts.append("</svg>")
    return "".join(parts)


def _extent(drawn: Sequence[tuple[str, Series]]) -> tuple[float, float, float]:
    """The earliest and latest x of every point, and the top of the y axis (the largest y, else 1)."""
    xs = [x for _, points in drawn for x, _ in points]
    top = max(y for _, points in drawn for _, y in points) or 1.0
    return min(xs), max(xs), top


def _scale(left: float, span: float, top: float) -> Callable[[float, float], str]:
    """A point's place in the plot area, as SVG's "x,y"."""
    plot_w = WIDTH_PX - PAD_LEFT_PX - PAD_RIGHT_PX
    plot_h = HEIGHT_PX - PAD_TOP_PX - PAD_BOTTOM_PX

    def at(x: float, y: float) -> str:
        px = PAD_LEFT_PX + (x - left) / span * plot_w
        py = PAD_TOP_PX + plot_h - y / top * plot_h
        return f"{px:.1f},{py:.1f}"

    return at


def _line_axes(title: str, left: float, right: float, top: float) -> list[str]:
    """A line chart's frame: its title, its axes, y's top and 0, x's first and last clock."""
    plot_h = HEIGHT_PX - PAD_TOP_PX - PAD_BOTTOM_PX
    return [
        f'<svg class="chart" role="img" width="{WIDTH_PX}" height="{HEIGHT_PX}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<line x1="{PAD_LEFT_PX}" y1="{PAD_TOP_PX + plot_h}" x2="{WIDTH_PX - PAD_RIGHT_PX}" '
        f'y2="{PAD_TOP_PX + plot_h}" class="axis"/>',
        f'<line x1="{PAD_LEFT_PX}" y1="{PAD_TOP_PX}" x2="{PAD_LEFT_PX}" y2="{PAD_TOP_PX + plot_h}" '
        'class="axis"/>',
        f'<text x="{PAD_LEFT_PX - 4}" y="{PAD_TOP_PX + 10}" text-anchor="end">{_number(top)}</text>',
        f'<text x="{PAD_LEFT_PX - 4}" y="{PAD_TOP_PX + plot_h}" text-anchor="end">0</text>',
        f'<text x="{PAD_LEFT_PX}" y="{HEIGHT_PX - 6}">{_clock(left)}</text>',
        f'<text x="{WIDTH_PX - PAD_RIGHT_PX}" y="{HEIGHT_PX - 6}" text-anchor="end">'
        f"{_clock(right)} UTC</text>",
    ]


def _line(index: int, name: str, points: Series, at: Callable[[float, float], str]) -> list[str]:
    """One series: its polyline (a lone point also as a dot, so it is still seen) and its label."""
    color = COLORS[index % len(COLORS)]
    parts = []
    if len(points) == 1:
        x, y = points[0]
        cx, cy = at(x, y).split(",")
        parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
    coordinates = " ".join(at(x, y) for x, y in points)
    parts.append(
        f'<polyline class="series" data-name="{escape(name)}" data-points="{len(points)}" '
        f'fill="none" stroke="{color}" stroke-width="1.5" points="{coordinates}"/>'
    )
    parts.append(
        f'<text x="{PAD_LEFT_PX + 8 + 150 * index}" y="{PAD_TOP_PX + 10}" fill="{color}">'
        f"{escape(name)}</text>"
    )
    return parts


def bar_chart(title: str, bars: Sequence[tuple[str, int]], *, empty: str = "no data yet") -> str:
    """Vertical bars (a histogram): label under the first and last bar, count as a tooltip."""
    if not bars or not any(count for _, count in bars):
        return _empty(title, empty)
    top = max(count for _, count in bars)
    plot_w = WIDTH_PX - PAD_LEFT_PX - PAD_RIGHT_PX
    plot_h = HEIGHT_PX - PAD_TOP_PX - PAD_BOTTOM_PX
    bar_w = plot_w / len(bars)
    parts = [
        f'<svg class="chart" role="img" width="{WIDTH_PX}" height="{HEIGHT_PX}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<text x="{PAD_LEFT_PX - 4}" y="{PAD_TOP_PX + 10}" text-anchor="end">{top}</text>',
        f'<text x="{PAD_LEFT_PX - 4}" y="{PAD_TOP_PX + plot_h}" text-anchor="end">0</text>',
    ]
    for index, (label, count) in enumerate(bars):
        height = count / top * plot_h
        x = PAD_LEFT_PX + index * bar_w
        parts.append(
            f'<rect class="bar" data-count="{count}" x="{x:.1f}" y="{PAD_TOP_PX + plot_h - height:.1f}" '
            f'width="{max(bar_w - 1, 1):.1f}" height="{height:.1f}" fill="{COLORS[0]}">'
            f"<title>{escape(label)}: {count}</title></rect>"
        )
    parts.append(f'<text x="{PAD_LEFT_PX}" y="{HEIGHT_PX - 6}">{escape(bars[0][0])}</text>')
    parts.append(
        f'<text x="{WIDTH_PX - PAD_RIGHT_PX}" y="{HEIGHT_PX - 6}" text-anchor="end">'
        f"{escape(bars[-1][0])}</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
