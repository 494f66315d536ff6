"""How long an engine's start takes when this host has no start of it on record, as data.

`bench` budgets every start it makes: from the starts of the same engine and release this host
recorded (`RunState.ready_s`), else from these stated defaults. The first start on a machine
compiles kernels (SGLang's JIT kernels and CUDA graphs, vLLM's torch.compile cache), so it is
counted apart from the later ones.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StartEstimate:
    """Seconds from launch to ready of a 20-30B model on one GPU, when nothing is recorded."""

    #: the first start on a machine: kernels are compiled
    first_s: float
    #: a later start: kernels cached
    later_s: float
    #: where the numbers come from, as the budget line says it
    basis: str


#: a release with no estimate of its own (a third engine)
UNKNOWN_START = StartEstimate(300.0, 120.0, "no start of this engine measured: a cautious guess")
