"""Value ranges are engine data: each names a flag every release table has, and reads values
the way the engine does (vLLM's human-readable ints, "auto", strict and inclusive bounds)."""

from __future__ import annotations

import pytest

from specpilot.engines.ranges import ValueRange, human_int
from specpilot.engines.registry import engine_by_name, release_tables


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_every_range_names_a_flag_of_a_shipped_release(engine: str) -> None:
    dests = set().union(*({f.dest for f in t.flags} for t in release_tables(engine)))
    ranges = engine_by_name(engine).value_ranges
    assert ranges, f"{engine} lists no value ranges"
    assert set(ranges) - dests == set(), "a range for a flag no release defines is never checked"
    assert all(r.source.startswith("https://") for r in ranges.values())


@pytest.mark.parametrize(
    ("text", "value"), [("32768", 32768), ("32K", 32768), ("25.6k", 25600), ("1G", 2**30), (" 8 ", 8)]
)
def test_human_int_reads_vllm_spellings(text: str, value: int) -> None:
    assert human_int(text) == value


UTILIZATION = ValueRange("gpu_memory_utilization", 0, 1, above_minimum=True)
LENGTH = ValueRange("max_model_len", 1, parse="human_int", special=("auto", "-1"))


@pytest.mark.parametrize(
    ("value_range", "text", "refused"),
    [
        (UTILIZATION, "0.9", False),
        (UTILIZATION, "1", False),
        (UTILIZATION, "1.5", True),
        (UTILIZATION, "0", True),
        (UTILIZATION, "nan", True),
        (UTILIZATION, "inf", True),
        (LENGTH, "32K", False),
        (LENGTH, "auto", False),
        (LENGTH, "-1", False),
        (LENGTH, "0", True),
        (LENGTH, "-2", True),
        (LENGTH, "abc", True),
    ],
)
def test_bounds_as_the_engine_reads_them(value_range: ValueRange, text: str, refused: bool) -> None:
    assert (value_range.problem(text) is not None) is refused
