"""The planner's output: a memory table, a verdict, and the knobs that make it fit.

The JSON form (`Plan.to_json`) is a stable interface: numbers are what the
engine prints at startup (SGLang's "GB" are GiB; vLLM's "GPU KV cache size" is
in tokens), so a launch can be checked against its plan line by line. Its keys
predate the engine-neutral attribute names (`memory_fraction` is written as
`mem_fraction_static` for both engines) and stay as they are for users' scripts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Self

from specpilot.engines.fix import Fix
from specpilot.engines.registry import SGLANG, VLLM
from specpilot.errors import UserError
from specpilot.plan.provenance import Provenance

GIB = 1024**3
#: decimals of the GiB figures and fractions in a plan's JSON
JSON_GIB_DECIMALS = 4


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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Problem:
        fix = data.get("fix")
        return cls(data["code"], data["message"], Fix.from_json(fix) if fix else None)


@dataclass(frozen=True)
class Term:
    """One line of the memory table."""

    name: str
    gib: float
    #: "measured" (a log or spec override), "estimated", "fitted" (to measured startup peaks),
    #: or "config" (follows from flags)
    source: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "gib": round(self.gib, JSON_GIB_DECIMALS)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Term:
        return cls(data["name"], float(data["gib"]), data["source"], data.get("note", ""))


class _Details:
    """JSON of a details record: attribute -> the key users' scripts already read."""

    #: the engine adapter's `name` whose plans carry this record
    engine: ClassVar[str]
    #: the engine's name for `Plan.memory_fraction`
    memory_knob: ClassVar[str]
    #: attribute -> JSON key, in output order
    JSON_KEYS: ClassVar[dict[str, str]]

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, name) for name, key in self.JSON_KEYS.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(**{name: data[key] for name, key in cls.JSON_KEYS.items()})


@dataclass(frozen=True)
class SglangDetails(_Details):
    """The effective SGLang settings behind a plan, as the engine also logs them."""

    context_len_tokens: int
    page_size_tokens: int
    #: --mamba-scheduler-strategy; None for a model without recurrent layers
    mamba_strategy: str | None
    overlap_schedule: bool
    state_slots_per_request: int
    speculative_num_draft_tokens: int
    #: whether the spec set --mem-fraction-static (else SGLang's default was planned)
    mem_fraction_static_given: bool
    chunked_prefill_size_tokens: int
    cuda_graph_max_batch_size: int
    #: free memory before the weights load, rounded to 0.001 GiB
    free_before_load_gib: float
    #: free memory after the last startup allocation, rounded to 0.001 GiB
    margin_gib: float
    #: the name of the largest allocation after the pools (the one that runs out first)
    largest_transient: str

    engine: ClassVar[str] = SGLANG.name
    memory_knob: ClassVar[str] = "mem_fraction_static"
    JSON_KEYS: ClassVar[dict[str, str]] = {
        "context_len_tokens": "context_len",
        "page_size_tokens": "page_size",
        "mamba_strategy": "mamba_strategy",
        "overlap_schedule": "overlap_schedule",
        "state_slots_per_request": "state_slots_per_request",
        "speculative_num_draft_tokens": "speculative_num_draft_tokens",
        "mem_fraction_static_given": "mem_fraction_static_given",
        "chunked_prefill_size_tokens": "chunked_prefill_size",
        "cuda_graph_max_batch_size": "cuda_graph_max_bs",
        "free_before_load_gib": "free_before_load_gib",
        "margin_gib": "margin_gib",
        "largest_transient": "largest_transient",
    }


@dataclass(frozen=True)
class VllmDetails(_Details):
    """The KV pool's geometry as vLLM logs it."""

    attention_block_size_tokens: int
    page_bytes: int
    kv_cache_groups: int
    num_blocks: int
    blocks_per_request: int
    #: how many max_model_len-token requests the pool holds at once, to 2 decimals as logged
    max_concurrency: float
    max_model_len_tokens: int

    engine: ClassVar[str] = VLLM.name
    memory_knob: ClassVar[str] = "gpu_memory_utilization"
    JSON_KEYS: ClassVar[dict[str, str]] = {
        "attention_block_size_tokens": "attention_block_size",
        "page_bytes": "page_bytes",
        "kv_cache_groups": "kv_cache_groups",
        "num_blocks": "num_blocks",
        "blocks_per_request": "blocks_per_request",
        "max_concurrency": "max_concurrency",
        "max_model_len_tokens": "max_model_len",
    }


EngineDetails = SglangDetails | VllmDetails
#: each engine's details record, to read a plan.json back (here, not in the planners above this
#: module, so that reading a plan needs no planner)
ENGINE_DETAILS: tuple[type[EngineDetails], ...] = (SglangDetails, VllmDetails)


def details_for(engine: str) -> type[EngineDetails]:
    """The details record of an engine's plans; an engine without one is said as such."""
    for details in ENGINE_DETAILS:
        if details.engine == engine:
            return details
    raise UserError(
        f"no plan details record for engine {engine!r}",
        field="engine",
        fix="a plan.json of a registered engine; a new engine's record goes in specpilot.plan.types",
    )


#: attribute -> JSON key where they differ
_RENAMED = {"memory_fraction": "mem_fraction_static"}
_ROUNDED = ("weights_gib", "memory_fraction", "reserve_gib", "reserve_needed_gib")


@dataclass(frozen=True)
class PrefillGate:
    """The plan against its release's prefill-CUDA-graph gate (a release that skips the graph
    when too little is free as its capture begins): the free memory the plan puts there, which
    side of the gate that is, and, where the gate is near (within the band above it, or below
    it), the same configuration's flags on the other side."""

    gate_gib: float
    #: free memory at the capture's start as planned
    free_gib: float
    #: whether the engine captures the graph at the plan's knobs (free at or above the gate)
    graph_kept: bool
    #: within the band above the gate or below it: a point on the other side is worth measuring
    near: bool
    #: the configuration's flags on the other side (empty: not near, or nothing fits there)
    other_side_args: tuple[str, ...] = ()
    #: whether the plan's recommendation is made again with `other_side_args` given (the graph
    #: turned off frees its room for KV), else they are given over the recommendation
    replan: bool = False
    #: what the other side is, in words
    other_side: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "other_side_args": list(self.other_side_args)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PrefillGate:
        return cls(**{**data, "other_side_args": tuple(data["other_side_args"])})


@dataclass(frozen=True)
class Plan:
    """A plan for either engine; each field means the same for both.

    The engine's memory knob (`memory_knob`) is the fraction it may take: SGLang's
    mem_fraction_static of the free memory, vLLM's gpu_memory_utilization of the total.
    The reserve is what stays outside that fraction, and the engine starts only when what
    must fit there (`reserve_needed_gib`: SGLang's activations and graphs, vLLM's other
    processes on the card) does. State slots hold one request's recurrent (mamba) state:
    SGLang's mamba pool, vLLM's blocks when the model has recurrent layers.
    """

    engine: str
    engine_version: str
    fits: bool
    weights_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    state_bytes_per_request: int
    state_slots: int
    max_running_requests: int
    memory_fraction: float
    reserve_gib: float
    reserve_needed_gib: float
    problems: list[Problem] = field(default_factory=list)
    recommended_args: list[str] = field(default_factory=list)
    recommended_env: dict[str, str] = field(default_factory=dict)
    terms: list[Term] = field(default_factory=list)
    measured: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    details: EngineDetails = field(kw_only=True)
    #: which release's arithmetic the plan used and the real starts behind it
    provenance: Provenance | None = None
    #: the release's prefill-graph gate against this plan (None: the release has none, or
    #: nothing is captured)
    prefill_gate: PrefillGate | None = None

    @property
    def memory_knob(self) -> str:
        """The engine's flag for `memory_fraction` (dest spelling)."""
        return self.details.memory_knob

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _ROUNDED:
                value = round(float(value), JSON_GIB_DECIMALS)
            data[_RENAMED.get(f.name, f.name)] = value
        data["problems"] = [p.to_json() for p in self.problems]
        data["recommended_args"] = list(self.recommended_args)
        data["recommended_env"] = dict(self.recommended_env)
        data["terms"] = [t.to_json() for t in self.terms]
        data["measured"] = dict(self.measured)
        data["notes"] = list(self.notes)
        data["details"] = self.details.to_json()
        data["provenance"] = self.provenance.to_json() if self.provenance else None
        data["prefill_gate"] = self.prefill_gate.to_json() if self.prefill_gate else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        """The plan `to_json` wrote (a run directory's plan.json)."""
        provenance = data.get("provenance")
        gate = data.get("prefill_gate")
        return cls(
            engine=data["engine"],
            engine_version=data["engine_version"],
            fits=data["fits"],
            weights_gib=data["weights_gib"],
            kv_bytes_per_token=data["kv_bytes_per_token"],
            kv_tokens=data["kv_tokens"],
            state_bytes_per_request=data["state_bytes_per_request"],
            state_slots=data["state_slots"],
            max_running_requests=data["max_running_requests"],
            memory_fraction=data["mem_fraction_static"],
            reserve_gib=data["reserve_gib"],
            reserve_needed_gib=data["reserve_needed_gib"],
            details=details_for(data["engine"]).from_json(data["details"]),
            problems=[Problem.from_json(p) for p in data["problems"]],
            recommended_args=list(data["recommended_args"]),
            recommended_env=dict(data["recommended_env"]),
            terms=[Term.from_json(t) for t in data["terms"]],
            measured=dict(data["measured"]),
            notes=list(data["notes"]),
            provenance=Provenance.from_json(provenance) if provenance else None,
            prefill_gate=PrefillGate.from_json(gate) if gate else None,
        )
