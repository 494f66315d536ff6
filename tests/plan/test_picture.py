"""`specpilot plan --svg/--html`: the card drawn to scale from the plan's term list."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.check.resolved import resolve
from specpilot.cli import cli
from specpilot.plan import make_plan
from specpilot.plan.compare import without_speculation
from specpilot.plan.picture import card_of, render_svg
from specpilot.plan.types import Plan, Term, VllmDetails
from specpilot.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


def _bars(svg_text: str) -> list[list[dict[str, str]]]:
    """The segments of each bar, grouped by their x position, top to bottom."""
    bars: dict[float, list[dict[str, str]]] = defaultdict(list)
    for rect in ET.fromstring(svg_text).iter(f"{SVG}rect"):
        if rect.get("class") == "segment":
            bars[float(rect.attrib["x"])].append(dict(rect.attrib))
    return [sorted(bars[x], key=lambda r: float(r["y"])) for x in sorted(bars)]


def _px_per_gib(segment: dict[str, str]) -> float:
    return float(segment["height"]) / float(segment["data-gib"])


def test_a_speculative_sglang_plan_is_drawn_next_to_its_plain_twin_on_one_scale(tmp_path: Path) -> None:
    spec_path = ROOT / "examples/qwen36-27b-mtp-sglang.toml"
    svg, html = tmp_path / "plan.svg", tmp_path / "plan.html"
    result = CliRunner().invoke(cli, ["plan", str(spec_path), "--svg", str(svg), "--html", str(html)])
    assert result.exit_code == 1, result.output  # the incident's flags do not fit
    said = "the card with and without speculative decoding, to scale"
    assert f"wrote {svg}: {said} (SVG)" in result.output
    assert f"wrote {html}: {said}, with the memory tables (HTML page)" in result.output
    bars = _bars(svg.read_text())
    assert len(bars) == 2
    with_mtp, plain = ({s["data-role"] for s in bar} for bar in bars)
    assert {
        "weights",
        "state pool",
        "speculative buffers",
        "KV cache",
        "runtime",
        "draft",
        "transient",
    } <= with_mtp
    assert "short" in with_mtp and "margin" not in with_mtp  # does not fit: the reserve falls short
    assert "speculative buffers" not in plain and "draft" not in plain and "margin" in plain
    # to scale: every segment (bar 1 and 2 alike) has the same pixels per GiB
    scales = [_px_per_gib(s) for bar in bars for s in bar if float(s["data-gib"]) > 2.0]
    assert max(scales) == pytest.approx(min(scales), rel=1e-3)
    # what is allocated before the reserve plus the reserve is the free memory the plan starts from
    spec = load_spec(spec_path)
    plan = make_plan(resolve(spec))
    card = card_of(plan, "x")
    free_gib = next(t.gib for t in plan.terms if t.name.startswith("free before"))
    assert sum(s.gib for s in card.allocated) + card.reserve_gib == pytest.approx(free_gib, abs=0.01)
    assert card.margin_gib == pytest.approx(plan.reserve_gib - plan.reserve_needed_gib, abs=1e-3)
    page = html.read_text()
    assert page.count("<svg") == 1 and "without it" in page and "does not fit" in page
    assert all(t.name in page for t in plan.terms)


def test_a_plan_without_speculation_is_one_bar_and_vllm_draws_too(tmp_path: Path) -> None:
    svg = tmp_path / "plan.svg"
    result = CliRunner().invoke(cli, ["plan", str(ROOT / "examples/qwen3-8b-vllm.toml"), "--svg", str(svg)])
    assert result.exit_code == 0, result.output
    (bar,) = _bars(svg.read_text())
    roles = [s["data-role"] for s in bar]
    assert roles[0] == "weights" and "KV cache" in roles and roles[-1] == "margin"
    assert "not assigned" not in roles  # requested = weights + activation + non-torch + graphs + KV


def _plan(terms: list[Term], reserve_gib: float, reserve_needed_gib: float) -> Plan:
    return Plan(
        engine="x", engine_version="1", fits=reserve_needed_gib <= reserve_gib, weights_gib=40.0,
        kv_bytes_per_token=1, kv_tokens=1, state_bytes_per_request=0, state_slots=0,
        max_running_requests=1, memory_fraction=0.9, reserve_gib=reserve_gib,
        reserve_needed_gib=reserve_needed_gib, terms=terms,
        # details without a margin of their own: the card's margin is reserve minus need
        details=VllmDetails(16, 65536, 1, 1, 1, 1.0, 16),
    )  # fmt: skip


def test_layout_comes_from_the_generic_term_list() -> None:
    card = card_of(
        _plan(
            [
                Term("free before weights load", 100.0, "estimated"),
                Term("model weights", 40.0, "estimated"),
                Term("reserve: whatever", 10.0, "config"),
                Term("KV cache: 9 tokens", 45.0, "config"),
                Term("a term nobody has named yet", 2.0, "estimated"),
                Term("warm-up spike", 3.0, "estimated", "peak"),
                Term("another spike", 1.0, "estimated", "peak"),
            ],
            reserve_gib=10.0,
            reserve_needed_gib=5.0,
        ),
        "t",
    )
    assert [(s.name, s.role) for s in card.allocated] == [
        ("model weights", "weights"),
        ("KV cache: 9 tokens", "KV cache"),
    ]
    assert [s.role for s in card.steady] == ["runtime"] and len(card.transients) == 2
    assert card.unassigned_gib == pytest.approx(5.0) and card.margin_gib == pytest.approx(5.0)
    (bar,) = _bars(render_svg([card]))
    heights = {s["data-role"]: float(s["height"]) for s in bar}
    assert heights["not assigned"] == pytest.approx(heights["margin"])
    # the two transients overlap (same top), they are not stacked
    tops = [float(s["y"]) for s in bar if s["data-role"] == "transient"]
    assert len(tops) == 2 and tops[0] == tops[1]


def test_without_speculation_removes_the_flags_and_their_values() -> None:
    spec = load_spec(ROOT / "examples/qwen36-27b-mtp-sglang.toml")
    extra = [
        "--speculative-adaptive",
        "--speculative-token-map=x.pt",
        "--mamba-scheduler-strategy",
        "extra_buffer",
    ]
    spec = spec.model_copy(
        update={"engine": spec.engine.model_copy(update={"args": [*spec.engine.args, *extra]})}
    )
    plain = without_speculation(spec)
    assert plain is not None
    assert not [a for a in plain.engine.args if "speculative" in a or a in ("NEXTN", "extra_buffer", "x.pt")]
    kept = [a for a in spec.engine.args if a not in plain.engine.args]
    assert "--speculative-adaptive" in kept and "3" not in plain.engine.args[-2:]
    assert without_speculation(plain) is None
    vllm = without_speculation(load_spec(ROOT / "examples/qwen36-27b-mtp-vllm.toml"))
    assert vllm is not None and not any("speculative" in a or "mtp" in a for a in vllm.engine.args)
