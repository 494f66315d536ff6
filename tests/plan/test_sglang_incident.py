"""The incident: Qwen3.6-27B + NEXTN (MTP) + extra_buffer on a 96 GB GPU with SGLang 0.5.13.

The engineer raised --mem-fraction-static to 0.92 and 0.95 to make room; the plan must
say why both OOM (the reserve left for what SGLang allocates after its pools is too small,
and raising the fraction shrinks it further) and give flags that fit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.plan import plan_inputs
from specpilot.plan.sglang.planner import plan_sglang
from specpilot.plan.types import Plan
from specpilot.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
INCIDENT_ARGS = [
    "--tp",
    "1",
    "--speculative-algorithm",
    "NEXTN",
    "--mamba-scheduler-strategy",
    "extra_buffer",
]


def plan(args: list[str], version: str = "0.5.13") -> Plan:
    spec = parse_spec(
        {
            "name": "qwen36-mtp",
            "model": {"path": str(ROOT / "examples/models/qwen3.6-27b"), "dtype": "bfloat16"},
            "gpu": {"memory_gib": 95.6},
            "engine": {
                "name": "sglang",
                "version": version,
                "args": args,
                "env": {"SGLANG_ENABLE_SPEC_V2": "1"},
            },
        }
    )
    shape, parsed = plan_inputs(spec)
    return plan_sglang(spec, shape, parsed)


@pytest.mark.parametrize("fraction", ["0.92", "0.95"])
def test_the_engineers_fractions_do_not_fit(fraction: str) -> None:
    result = plan([*INCIDENT_ARGS, "--mem-fraction-static", fraction])
    assert not result.fits
    codes = [p.code for p in result.problems]
    assert codes == ["reserve_too_small"]
    message = result.problems[0].message
    assert "draft load peak" in message  # the term that breaks it
    assert "makes this worse" in message
    assert result.reserve_gib < result.reserve_needed_gib


def test_a_higher_fraction_shrinks_the_reserve_it_needs() -> None:
    low = plan([*INCIDENT_ARGS, "--mem-fraction-static", "0.92"])
    high = plan([*INCIDENT_ARGS, "--mem-fraction-static", "0.95"])
    assert high.reserve_gib < low.reserve_gib
    assert high.reserve_needed_gib - high.reserve_gib > low.reserve_needed_gib - low.reserve_gib


def test_the_recommended_flags_fit_and_keep_concurrency() -> None:
    failing = plan([*INCIDENT_ARGS, "--mem-fraction-static", "0.92"])
    recommended = failing.recommended_args
    assert failing.problems[0].fix is not None
    assert list(failing.problems[0].fix.args) == recommended
    fraction = float(recommended[recommended.index("--mem-fraction-static") + 1])
    assert fraction < 0.92
    fixed = plan(["--tp", "1", "--speculative-algorithm", "NEXTN", *recommended])
    assert fixed.fits
    assert fixed.reserve_gib >= fixed.reserve_needed_gib * 1.1
    assert fixed.max_running_requests == int(recommended[recommended.index("--max-running-requests") + 1])
    assert fixed.max_running_requests >= 8
    assert fixed.kv_tokens >= fixed.max_running_requests * 4096


def test_the_engineers_small_state_pool_starves_concurrency() -> None:
    """--max-mamba-cache-size 24 with extra_buffer + overlap: 24 // 5 = 4 requests."""
    result = plan([*INCIDENT_ARGS, "--mem-fraction-static", "0.80", "--max-mamba-cache-size", "24"])
    assert result.state_slots == 24
    assert result.max_running_requests == 4


def test_speculation_is_flagged_for_bulk_generation() -> None:
    result = plan([*INCIDENT_ARGS, "--mem-fraction-static", "0.92"])
    note = next(n for n in result.notes if n.startswith("speculative decoding"))
    assert "790 tok/s per H200" in note


def test_from_0_5_14_the_draft_is_inside_the_profiled_budget() -> None:
    result = plan(
        [
            "--tp",
            "1",
            "--speculative-algorithm",
            "NEXTN",
            "--mamba-radix-cache-strategy",
            "extra_buffer",
            "--mem-fraction-static",
            "0.92",
        ],
        version="0.5.14",
    )
    names = [t.name for t in result.terms]
    assert "draft weights (loaded before profiling)" in names
    assert "draft KV cache" not in names
    assert result.recommended_args[-2:] == ["--mamba-radix-cache-strategy", "extra_buffer"]


def test_the_no_buffer_attempt_gets_a_startable_recommendation() -> None:
    """SGLang 0.5.13 rejects NEXTN + radix cache + no_buffer: the fix moves to extra_buffer
    and sets SGLANG_ENABLE_SPEC_V2=1, as the engine's own error message asks."""
    result = plan(
        [
            "--tp",
            "1",
            "--speculative-algorithm",
            "NEXTN",
            "--mem-fraction-static",
            "0.90",
            "--mamba-scheduler-strategy",
            "no_buffer",
        ]
    )
    args = result.recommended_args
    assert args[args.index("--mamba-scheduler-strategy") + 1] == "extra_buffer"
    assert result.recommended_env == {"SGLANG_ENABLE_SPEC_V2": "1"}
