"""The planner's output: a memory table, a verdict, and the knobs that make it fit.

The JSON form (`Plan.to_json`) is a stable interface: numbers are what the
engine prints at startup (SGLang's "GB" are GiB; vLLM's "GPU KV cache size" is
in tokens), so a launch can be checked against its plan line by line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from specpilot.engines.fix import Fix
from specpilot.plan.provenance import Provenance

GIB = 1024**3


def gib(num_bytes: float) -> float:
    """Bytes -> GiB."""
    return num_bytes / GIB


@dataclass(frozen=True)
class Problem:
    """Why a configuration does not fit or will not start, and what to change."""

    code: str
    message: str
    fix: Fix | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "fix": self.fix.to_json() if self.fix else None,
        }


@dataclass(frozen=True)
class Term:
    """One line of the memory table."""

    name: str
    gib: float
    #: "measured" (a log or spec override), "estimated", or "config" (follows from flags)
    source: str
    note: str = ""


@dataclass
class Plan:
    engine: str
    engine_version: str
    fits: bool
    weights_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    state_bytes_per_request: int
    state_slots: int
    max_running_requests: int
    #: SGLang's mem_fraction_static, or vLLM's gpu_memory_utilization
    mem_fraction_static: float
    reserve_gib: float
    reserve_needed_gib: float
    problems: list[Problem] = field(default_factory=list)
    recommended_args: list[str] = field(default_factory=list)
    recommended_env: dict[str, str] = field(default_factory=dict)
    terms: list[Term] = field(default_factory=list)
    measured: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: engine-specific extra numbers worth showing (context length, page size, ...)
    details: dict[str, Any] = field(default_factory=dict)
    #: which release's arithmetic the plan used and the real starts behind it
    provenance: Provenance | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["problems"] = [p.to_json() for p in self.problems]
        for key in ("weights_gib", "reserve_gib", "reserve_needed_gib", "mem_fraction_static"):
            data[key] = round(float(data[key]), 4)
        data["terms"] = [{**asdict(t), "gib": round(t.gib, 4)} for t in self.terms]
        data["provenance"] = self.provenance.to_json() if self.provenance else None
        return data
