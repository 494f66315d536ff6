"""Real engine starts the planner's numbers were compared with on a GPU: the record type.

Each engine's records live beside its release table (`MEASURED` in
`specpilot.engines.sglang.releases` and `specpilot.engines.vllm.releases`);
`specpilot.plan.provenance` reads both.
"""

from __future__ import annotations

from dataclasses import dataclass

ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}


@dataclass(frozen=True)
class MeasuredRelease:
    """Real starts of one engine release that the planner's numbers were compared with."""

    engine: str
    release: str
    gpu: str
    starts: int
    #: where the runs, logs and comparison are kept (a path in this repository)
    source: str

    def describe(self) -> str:
        name = ENGINE_NAMES[self.engine]
        return f"{name} {self.release} on {self.gpu}, {self.starts} starts, {self.source}"
