"""Real engine starts the planner's numbers were compared with on a GPU: the record type.

Each engine's records live beside its release table (`MEASURED` in
`specpilot.engines.sglang.releases` and `specpilot.engines.vllm.releases`), its adapter
carries them, and `specpilot.plan.provenance` reads every adapter's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasuredRelease:
    """Real starts of one engine release that the planner's numbers were compared with."""

    engine: str
    release: str
    gpu: str
    starts: int
    #: where the runs, logs and comparison are kept (a path in this repository)
    source: str

    def describe(self, display_name: str) -> str:
        """`display_name`: the engine's, from its adapter."""
        return f"{display_name} {self.release} on {self.gpu}, {self.starts} starts, {self.source}"
