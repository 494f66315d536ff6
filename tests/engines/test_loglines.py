"""The log-line language: which printing counts, per rank, and which declaration wins."""

from __future__ import annotations

import re

import pytest

from specpilot.engines.loglines import LogQuantity, Pick, Unit, rank_of, read_log
from specpilot.engines.sglang import loglines as sglang_lines
from specpilot.engines.vllm import loglines as vllm_lines

_SRC = "https://example.org/engine.py#L1"
_LOADED = re.compile(r"loaded (?P<value>[0-9.]+) GiB")
TARGET_AND_DRAFT = (
    LogQuantity("weights_gib", _LOADED, Unit.GIB, _SRC),
    LogQuantity("draft_weights_gib", _LOADED, Unit.GIB, _SRC, pick=Pick.SECOND),
)


def test_first_printing_is_the_target_and_second_the_draft() -> None:
    text = "[t TP0] loaded 51.05 GiB\n[t TP0] loaded 5.53 GiB\n"
    assert read_log(TARGET_AND_DRAFT, text) == {"weights_gib": 51.05, "draft_weights_gib": 5.53}


def test_a_second_rank_is_not_a_draft() -> None:
    """Every rank prints its own weight line; only a rank's second line is the draft's."""
    tp2 = "[t TP0] loaded 14.49 GiB\n[t TP1] loaded 14.49 GiB\n"
    assert read_log(TARGET_AND_DRAFT, tp2) == {"weights_gib": 14.49}
    tp2_draft = tp2 + "[t TP0] loaded 1.20 GiB\n[t TP1] loaded 1.20 GiB\n"
    assert read_log(TARGET_AND_DRAFT, tp2_draft) == {"weights_gib": 14.49, "draft_weights_gib": 1.2}


def test_the_first_declared_line_wins_whatever_order_the_lines_come_in() -> None:
    quantities = (
        LogQuantity("kv_tokens", re.compile(r"pool #tokens: (?P<value>\d+)"), Unit.TOKENS, _SRC),
        LogQuantity("kv_tokens", re.compile(r"max_total=(?P<value>[\d,]+)"), Unit.TOKENS, _SRC),
    )
    assert read_log(quantities, "max_total=1,000\npool #tokens: 990\n") == {"kv_tokens": 990}
    assert read_log(quantities, "max_total=1,000\n") == {"kv_tokens": 1000}


def test_units_read_as_their_type_through_colours() -> None:
    quantities = (
        LogQuantity("kv_tokens", re.compile(r"(?P<value>[\d,]+) tokens"), Unit.TOKENS, _SRC),
        LogQuantity("architecture", re.compile(r"arch: (?P<value>\w+)"), Unit.TEXT, _SRC),
        LogQuantity("fraction", re.compile(r"util (?P<value>[\d.]+)"), Unit.FRACTION, _SRC),
    )
    text = "\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0m 1,234 tokens\narch: Qwen3ForCausalLM\nutil 0.9\n"
    values = read_log(quantities, text)
    assert values == {"kv_tokens": 1234, "architecture": "Qwen3ForCausalLM", "fraction": 0.9}
    assert isinstance(values["kv_tokens"], int)


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[2026-08-20 03:10:54 TP1] Load weight end.", ("TP1",)),
        ("[2026-01-01 10:00:00 DP0 TP1 EP1] x", ("DP0", "TP1", "EP1")),
        ("(Worker_TP1 pid=12) INFO Model loading took", ("TP1",)),
        ("[2026-11-30 18:51:31] Load weight begin.", ()),
        ("(APIServer pid=1) INFO", ()),
    ],
)
def test_rank_of_a_line(line: str, rank: tuple[str, ...]) -> None:
    assert rank_of(line) == rank


def test_a_pattern_without_its_value_group_is_refused() -> None:
    with pytest.raises(ValueError, match="no \\(\\?P<value>"):
        LogQuantity("x", re.compile(r"x (\d+)"), Unit.COUNT, _SRC)


@pytest.mark.parametrize("quantity", sglang_lines.QUANTITIES + vllm_lines.QUANTITIES, ids=lambda q: q.key)
def test_every_declared_quantity_names_a_public_source(quantity: LogQuantity) -> None:
    assert quantity.source.startswith(("https://github.com/", "https://pypi.org/")), quantity
