"""Compare what the engine allocated (read from its log) with what the plan predicted.

The numbers are the engine's log quantities (`engines/<engine>/loglines.py`), read by
the same reader calibration uses, so `up` and `plan --from-log` see the same values
(the target's weights, not a speculative draft's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from specpilot.engines.loglines import Value
from specpilot.plan.types import JSON_GIB_DECIMALS, Plan

#: the quantities `up` reports, under the plan's name (Plan.to_json()) -> the log's name
REPORTED: dict[str, str] = {
    "kv_tokens": "kv_tokens",
    "state_slots": "max_mamba_cache_size",
    "max_running_requests": "max_running_requests",
    "weights_gib": "weights_gib",
    "max_concurrency": "max_concurrency",
    "available_kv_gib": "available_kv_gib",
}
#: the reported numbers compared with the plan, and the plan's value of each as its JSON says it
COMPARED: dict[str, Callable[[Plan], float]] = {
    "kv_tokens": lambda plan: plan.kv_tokens,
    "state_slots": lambda plan: plan.state_slots,
    "max_running_requests": lambda plan: plan.max_running_requests,
    "weights_gib": lambda plan: round(plan.weights_gib, JSON_GIB_DECIMALS),
}
WARN_ABOVE_PCT = 5.0


def allocations(values: Mapping[str, Value]) -> dict[str, int | float]:
    """The reported numbers among a log's values, by the plan's names."""
    found: dict[str, int | float] = {}
    for name, key in REPORTED.items():
        value = values.get(key)
        if isinstance(value, int | float):
            found[name] = value
    return found


def plan_diff(allocations: Mapping[str, float], plan: Plan | None) -> list[dict[str, Any]]:
    """One entry per number the engine printed: planned, engine, difference, warn (> 5%)."""
    if plan is None:
        return []
    diffs = []
    for key, planned_of in COMPARED.items():
        planned, printed = planned_of(plan), allocations.get(key)
        if printed is None:
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
