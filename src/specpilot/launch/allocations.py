"""Compare what the engine allocated (parsed from its log) with what the plan predicted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: allocation names shared by the log signatures and Plan.to_json()
COMPARED = ("kv_tokens", "state_slots", "max_running_requests", "weights_gib")
WARN_ABOVE_PCT = 5.0


def plan_diff(allocations: Mapping[str, float], plan: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One entry per number both sides have: planned, engine, difference, warn (> 5%)."""
    if not plan:
        return []
    diffs = []
    for key in COMPARED:
        planned, printed = plan.get(key), allocations.get(key)
        if not isinstance(planned, int | float) or isinstance(planned, bool) or printed is None:
            continue
        # against a plan of zero, any allocation is "100% off"
        diff_pct = (printed - planned) / planned * 100.0 if planned else float(printed != 0) * 100.0
        diffs.append(
            {
                "key": key,
                "planned": planned,
                "engine": printed,
                "diff_pct": round(diff_pct, 2),
                "warn": abs(diff_pct) > WARN_ABOVE_PCT,
            }
        )
    return diffs
