"""The log lines that open and close each phase of an SGLang start (0.5.13.post1 and 0.5.17
print them; shortened, a 0.5.17 start with MTP):

    Load weight begin. avail mem=94.93 GB                      weights
    Load weight end. ... type=Qwen3_5ForConditionalGeneration
    Load weight begin. avail mem=43.84 GB                      draft weights
    Load weight end. ... type=Qwen3_5ForCausalLMMTP
    Mamba Cache is allocated. ... / KV Cache is allocated. ...
    Memory pool end. avail mem=5.77 GB                         pools (the target's)
    KV Cache is allocated. ...
    Memory pool end. avail mem=5.63 GB                         pools (the draft's)
    Capture target prefill CUDA graph begin. ...               graph: target prefill
    Capture target prefill CUDA graph end. ...
    ...                                                        graph: target verify, draft decode, ...
    The server is fired up and ready to roll!                  (after the warm-up request)

0.5.13.post1 spells the graph lines `Capture cuda graph begin` (target decode), `Capture
piecewise CUDA graph begin`, `Capture draft cuda graph begin`, `Capture draft extend cuda graph
begin`. Every line that prints `avail mem=X GB` states the engine's own free memory (GiB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specpilot.engines.phases import MarkerKind, StartupPhases

_TREE = "https://github.com/sgl-project/sglang/blob/v0.5.17/python/sglang/srt"


@dataclass(frozen=True)
class PhaseMarker:
    """A log line that opens or closes a phase; `phase` may use the pattern's `family` group."""

    kind: MarkerKind
    phase: str
    pattern: re.Pattern[str]
    source: str


_GRAPH = re.compile(r"Capture (?:(?P<family>[a-z][a-z ]*?) )?(?:CUDA|cuda) graph (?P<edge>begin|end)")

MARKERS: tuple[PhaseMarker, ...] = (
    PhaseMarker(
        "begin", "weights", re.compile(r"Load weight begin\."), f"{_TREE}/model_executor/model_runner.py"
    ),
    PhaseMarker(
        "end", "weights", re.compile(r"Load weight end\."), f"{_TREE}/model_executor/model_runner.py"
    ),
    PhaseMarker(
        "pools_end", "pools", re.compile(r"Memory pool end\."), f"{_TREE}/mem_cache/kv_cache_configurator.py"
    ),
    PhaseMarker("begin", "graph: {family}", _GRAPH, f"{_TREE}/model_executor/model_runner.py"),
    PhaseMarker(
        "ready",
        "ready",
        re.compile(r"The server is fired up and ready to roll"),
        f"{_TREE}/entrypoints/http_server.py",
    ),
)

#: the family of 0.5.13.post1's unnamed `Capture cuda graph` (the target's decode graphs)
UNNAMED_GRAPH_FAMILY = "decode"
#: `avail mem=X GB` on a log line: the engine's free memory at that moment (GiB)
AVAIL_MEM = re.compile(r"avail mem=(?P<value>\d+(?:\.\d+)?) ?GB")


def match_marker(text: str) -> tuple[MarkerKind, str] | None:
    """(kind, phase) of a marker line; a graph line's kind is its edge (begin or end)."""
    for marker in MARKERS:
        found = marker.pattern.search(text)
        if found is None:
            continue
        if marker.pattern is _GRAPH:
            family = found["family"] or UNNAMED_GRAPH_FAMILY
            return ("begin" if found["edge"] == "begin" else "end"), marker.phase.format(family=family)
        return marker.kind, marker.phase
    return None


PHASES = StartupPhases(match_marker, AVAIL_MEM)
