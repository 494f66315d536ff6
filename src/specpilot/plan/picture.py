"""The memory plan drawn to scale: one stacked bar per plan (`specpilot plan --svg/--html`).

The bar is read from the plan's generic term list (`Plan.terms`), not from any engine's
named fields, so a planner that renames or adds terms still draws. Each term's role
comes from a table of name patterns (`ROLES`); the table's order is the only
engine knowledge here. The memory table's convention places the terms allocated from
the reserve after the reserve's own line, so a term listed after it that is not a pool
(state, speculative buffers, KV) is drawn inside the reserve. Transients (notes
"peak") never coincide, so they are drawn overlapping from the same offset; the margin
is the plan's own (`SglangDetails.margin_gib`, else `reserve_gib - reserve_needed_gib`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape

from specpilot.plan.text import reserve_text
from specpilot.plan.types import Plan, SglangDetails

#: (pattern over the lower-cased term name, role); first match wins
ROLES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^free before|^requested\b"), "total"),
    (re.compile(r"^reserve\b"), "reserve"),
    (re.compile(r"peak|activation"), "transient"),
    (re.compile(r"speculative"), "speculative buffers"),
    (re.compile(r"draft"), "draft"),
    (re.compile(r"weights"), "weights"),
    (re.compile(r"state pool|state cache|mamba"), "state pool"),
    (re.compile(r"\bkv\b"), "KV cache"),
)
#: roles allocated as pools even when listed after the reserve's line
POOL_ROLES = frozenset({"state pool", "speculative buffers", "KV cache"})
OTHER = "runtime"
PEAK_NOTE = "peak"

COLORS = {
    "weights": "#4e79a7",
    "draft": "#f28e2b",
    "state pool": "#59a14f",
    "speculative buffers": "#edc948",
    "KV cache": "#76b7b2",
    "runtime": "#9c755f",
    "transient": "#e15759",
    "margin": "#b9e3b0",
    "short": "#d62728",
    "not assigned": "#dddddd",
}

BAR_HEIGHT_PX = 560
BAR_WIDTH_PX = 110
LABEL_WIDTH_PX = 360
TOP_PX, BOTTOM_PX = 48, 40
LINE_PX = 13


def role_of(name: str, note: str = "") -> str:
    if note == PEAK_NOTE:
        return "transient"
    lowered = name.lower()
    for pattern, role in ROLES:
        if pattern.search(lowered):
            return role
    return OTHER


@dataclass(frozen=True)
class Segment:
    name: str
    gib: float
    role: str


@dataclass(frozen=True)
class Card:
    """One plan as a bar: what is allocated before the reserve, then the reserve's contents."""

    title: str
    subtitle: str
    length_gib: float
    allocated: list[Segment]
    reserve_gib: float
    steady: list[Segment]
    transients: list[Segment]
    reserve_needed_gib: float
    fits: bool
    #: free after the last startup allocation: the plan's own figure where it has one (SGLang
    #: counts memory freed after the pools), else reserve minus what it must hold
    margin_gib: float

    @property
    def unassigned_gib(self) -> float:
        return self.length_gib - sum(s.gib for s in self.allocated) - self.reserve_gib


def card_of(plan: Plan, title: str) -> Card:
    lanes: dict[str, list[Segment]] = {"allocated": [], "steady": [], "transients": []}
    total_gib = 0.0
    after_reserve = False
    for term in plan.terms:
        role = role_of(term.name, term.note)
        if role == "total":
            total_gib = max(total_gib, term.gib)
        elif role == "reserve":
            after_reserve = True
        elif term.gib <= 0:
            continue
        else:
            lanes[_lane(role, after_reserve)].append(Segment(term.name, term.gib, role))
    allocated, steady, transients = lanes["allocated"], lanes["steady"], lanes["transients"]
    length = max(total_gib, sum(s.gib for s in allocated) + plan.reserve_gib)
    subtitle = (
        f"{length:.2f} GiB · KV {plan.kv_tokens:,} tokens · {plan.max_running_requests:,} requests · "
        f"{'fits' if plan.fits else 'does not fit'}"
    )
    return Card(
        title,
        subtitle,
        length,
        allocated,
        plan.reserve_gib,
        steady,
        transients,
        plan.reserve_needed_gib,
        plan.fits,
        _margin_gib(plan),
    )


def _lane(role: str, after_reserve: bool) -> str:
    """Where a term is drawn: a transient listed after the reserve's line overlaps inside it, a
    steady term after it is drawn inside the reserve, a pool is allocated wherever it is listed."""
    if role == "transient":
        return "transients" if after_reserve else "allocated"
    if after_reserve and role not in POOL_ROLES:
        return "steady"
    return "allocated"


def _margin_gib(plan: Plan) -> float:
    if isinstance(plan.details, SglangDetails):
        return plan.details.margin_gib
    return plan.reserve_gib - plan.reserve_needed_gib


@dataclass(frozen=True)
class _Box:
    start_gib: float
    gib: float
    label: str
    role: str
    hatched: bool = False


def _boxes(card: Card) -> list[_Box]:
    """Every rectangle of a card, in GiB from the bar's top."""
    boxes: list[_Box] = []
    at = 0.0
    for segment in card.allocated:
        boxes.append(_Box(at, segment.gib, segment.name, segment.role, segment.role == "transient"))
        at += segment.gib
    if card.unassigned_gib > card.length_gib * 1e-3:
        boxes.append(_Box(at, card.unassigned_gib, "not assigned", "not assigned"))
        at += card.unassigned_gib
    reserve_start = at
    for segment in card.steady:
        boxes.append(_Box(at, segment.gib, segment.name, segment.role))
        at += segment.gib
    for segment in card.transients:  # they never coincide: each from the same offset
        boxes.append(_Box(at, segment.gib, f"{segment.name} (transient)", "transient", True))
    reserve_end = reserve_start + card.reserve_gib
    if card.margin_gib >= 0:
        boxes.append(_Box(reserve_end - card.margin_gib, card.margin_gib, "margin", "margin"))
    else:
        boxes.append(_Box(reserve_end, -card.margin_gib, "short of the reserve", "short", True))
    return boxes


def _card_svg(card: Card, x_px: float, px_per_gib: float) -> list[str]:
    parts = [
        f'<text x="{x_px}" y="18" class="title">{escape(card.title)}</text>',
        f'<text x="{x_px}" y="34">{escape(card.subtitle)}</text>',
    ]
    reserve_top = TOP_PX + (card.length_gib - card.reserve_gib) * px_per_gib
    labels: list[tuple[float, str, str]] = []
    for box in _boxes(card):
        y = TOP_PX + box.start_gib * px_per_gib
        height = max(box.gib * px_per_gib, 0.5)
        fill = "url(#hatch)" if box.hatched else COLORS[box.role]
        stroke = COLORS[box.role] if box.hatched else "#ffffff"
        parts.append(
            f'<rect class="segment" data-role="{escape(box.role)}" data-gib="{box.gib:.3f}" '
            f'x="{x_px}" y="{y:.2f}" width="{BAR_WIDTH_PX}" height="{height:.2f}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="0.5">'
            f"<title>{escape(box.label)}: {box.gib:.2f} GiB</title></rect>"
        )
        labels.append((y + height / 2, f"{box.label}: {box.gib:.2f} GiB", COLORS[box.role]))
    parts.append(
        f'<rect x="{x_px - 4}" y="{reserve_top:.2f}" width="{BAR_WIDTH_PX + 8}" '
        f'height="{card.reserve_gib * px_per_gib:.2f}" fill="none" stroke="#333" stroke-dasharray="4 2">'
        f"<title>reserve: {card.reserve_gib:.2f} GiB</title></rect>"
    )
    labels.append((reserve_top - 1, reserve_text(card.reserve_gib, card.reserve_needed_gib), "#333"))
    # labels beside the bar, pushed apart so none overlap, joined to their box by a line
    labels.sort()
    placed = [wanted for wanted, _, _ in labels]
    for index in range(1, len(placed)):  # push down past the one above ...
        placed[index] = max(placed[index], placed[index - 1] + LINE_PX)
    lowest = float(TOP_PX + BAR_HEIGHT_PX + BOTTOM_PX - 2 * LINE_PX)
    for index in reversed(range(len(placed))):  # ... then up, to stay inside the picture
        lowest = placed[index] = min(placed[index], lowest)
        lowest -= LINE_PX
    for (wanted_y, text, color), label_y in zip(labels, placed, strict=True):
        parts.append(
            f'<line x1="{x_px + BAR_WIDTH_PX + 6}" y1="{wanted_y:.1f}" x2="{x_px + BAR_WIDTH_PX + 22}" '
            f'y2="{label_y:.1f}" stroke="{color}"/>'
            f'<text x="{x_px + BAR_WIDTH_PX + 26}" y="{label_y + 4:.1f}">{escape(text)}</text>'
        )
    return parts


def render_svg(cards: list[Card]) -> str:
    """The cards side by side on one GiB scale."""
    longest = max(c.length_gib + max(-c.margin_gib, 0.0) for c in cards) or 1.0
    px_per_gib = BAR_HEIGHT_PX / longest
    width = len(cards) * (BAR_WIDTH_PX + LABEL_WIDTH_PX) + 16
    height = TOP_PX + BAR_HEIGHT_PX + BOTTOM_PX
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fbe3e3"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#e15759" stroke-width="3"/></pattern>'
        "<style>.title{font-size:13px;font-weight:bold}</style></defs>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    for index, card in enumerate(cards):
        parts += _card_svg(card, 8 + index * (BAR_WIDTH_PX + LABEL_WIDTH_PX), px_per_gib)
    legend_y = height - 8
    x = 8
    for role, color in COLORS.items():
        parts.append(
            f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{legend_y}">{escape(role)}</text>'
        )
        x += 24 + 7 * len(role)
    parts.append("</svg>")
    return "".join(parts)


def render_html(cards: list[Card], plans: list[Plan]) -> str:
    """A standalone page: the picture, then each plan's memory table."""
    tables = []
    for card, plan in zip(cards, plans, strict=True):
        rows = "".join(
            f"<tr><td>{escape(t.name)}</td><td style='text-align:right'>{t.gib:,.2f}</td>"
            f"<td>{escape(t.source)}</td><td>{escape(t.note)}</td></tr>"
            for t in plan.terms
        )
        tables.append(
            f"<h2>{escape(card.title)}</h2><p>{escape(card.subtitle)}</p>"
            f"<table><tr><th>term</th><th>GiB</th><th>source</th><th>note</th></tr>{rows}</table>"
        )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>specpilot memory plan</title>'
        "<style>body{font:14px sans-serif;margin:16px}td,th{padding:2px 12px 2px 0;text-align:left}"
        "</style></head><body><h1>memory plan (per GPU, to scale)</h1>"
        + render_svg(cards)
        + "".join(tables)
        + "</body></html>"
    )
