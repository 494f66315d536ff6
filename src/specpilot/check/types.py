"""The vocabulary of `specpilot check`: facts in, findings and effective args out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from packaging.version import Version

from specpilot.fixes import Fix

Severity = Literal["error", "warning", "adjusts"]


@dataclass(frozen=True)
class GpuFacts:
    """What the engine's validation asks the GPU; defaults describe the incident's 96 GB SM 12.0 card."""

    memory_gib: float = 96.0
    compute_capability: tuple[int, int] = (12, 0)
    is_cuda: bool = True
    #: the GPU's model name as the spec gives it (vLLM's batch defaults except A100s)
    name: str | None = None


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str
    fix: Fix | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix.to_json() if self.fix else None,
        }


@dataclass
class Context:
    """One launch as the engine's validation sees it, updated as `adjusts` rules fire.

    `values` holds every flag's effective value (release default, then what was given,
    then the engine's own adjustments so far); `given` the dests the user set.
    """

    engine: str
    version: Version
    values: dict[str, object]
    given: frozenset[str]
    env: Mapping[str, str]
    architecture: str | None
    gpu: GpuFacts
    spelled: Mapping[str, str] = field(default_factory=dict)
    #: MTP layers the target model ships (None when unknown: no config was read)
    mtp_layers: int | None = None
    #: whether the model has linear-attention (mamba/GDN) layers (None when unknown)
    hybrid: bool | None = None
    #: the longest context this engine derives from the model's config (None: unknown)
    model_context_len: int | None = None

    def get(self, dest: str) -> object:
        return self.values.get(dest)

    def flag(self, dest: str, default: str | None = None) -> str:
        """The spelling to quote back to the user for a dest."""
        return self.spelled.get(dest, default or "--" + dest.replace("_", "-"))


@dataclass
class CheckResult:
    ok: bool
    findings: list[Finding]
    effective_args: list[str]
    effective_env: dict[str, str]
    engine: str = ""
    version: str = ""
    #: every flag's value after the engine's adjustments (dest -> value), for the planner
    effective_values: dict[str, object] = field(default_factory=dict)
    #: the dests the user set (the rest of `effective_values` are defaults or adjustments)
    given: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "engine": self.engine,
            "engine_version": self.version,
            "findings": [f.to_json() for f in self.findings],
            "effective_args": self.effective_args,
            "effective_env": self.effective_env,
        }
