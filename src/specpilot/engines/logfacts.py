"""What a startup log said, as one typed record: a field per quantity any engine's log declares.

Each engine's `loglines.QUANTITIES` names the numbers and words its log prints; `read_log`
reads them into a dict by those names and `LogFacts.from_values` makes the record (a name
that is no field is a bug in a declaration, refused). Each field's role says what
calibration (`plan --from-log`) does with it:

- input: a measured number the planner may use in place of an estimate (fed back);
- predicted: a number the plan predicts; comparing against it is the point, so never fed back;
- setting: the server's own setting as the log prints it, checked against the spec;
- identity: which engine release, model and cache type the log is of (text);
- term: a term of a derived input (SGLang's free memory after load), not fed itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, get_type_hints

from specpilot.engines.loglines import Value


class Role(StrEnum):
    INPUT = "input"
    PREDICTED = "predicted"
    SETTING = "setting"
    IDENTITY = "identity"
    TERM = "term"


def _fact(role: Role) -> Any:
    return field(default=None, metadata={"role": role})


@dataclass(frozen=True)
class LogFacts:
    """The quantities one startup log printed; None: the log has no such line."""

    # identity
    version: str | None = _fact(Role.IDENTITY)
    architecture: str | None = _fact(Role.IDENTITY)
    #: the target's KV cache dtype (SGLang's "dtype: torch.bfloat16")
    kv_dtype: str | None = _fact(Role.IDENTITY)
    # measured inputs (SGLang's draft pool, chunk size and memory fraction are fed too: no
    # planner reads them, so they change no plan)
    free_before_load_gib: float | None = _fact(Role.INPUT)
    weights_gib: float | None = _fact(Role.INPUT)
    draft_weights_gib: float | None = _fact(Role.INPUT)
    draft_kv_tokens: int | None = _fact(Role.INPUT)
    chunked_prefill_size: int | None = _fact(Role.INPUT)
    mem_fraction_static: float | None = _fact(Role.INPUT)
    available_kv_gib: float | None = _fact(Role.INPUT)
    cudagraph_gib: float | None = _fact(Role.INPUT)
    #: the device's memory (the node's on vLLM's CPU backend)
    gpu_total_gib: float | None = _fact(Role.INPUT)
    gpu_memory_utilization: float | None = _fact(Role.INPUT)
    activation_peak_gib: float | None = _fact(Role.INPUT)
    non_torch_gib: float | None = _fact(Role.INPUT)
    #: weights + non-torch memory (vLLM 0.3x's summary line)
    consumed_gib: float | None = _fact(Role.INPUT)
    cudagraph_actual_gib: float | None = _fact(Role.INPUT)
    #: what the target's weights left (with them: free memory before load, when no begin line was kept)
    free_after_load_gib: float | None = _fact(Role.TERM)
    # predicted by the plan
    kv_tokens: int | None = _fact(Role.PREDICTED)
    #: the target's K pool (with its tokens: the K bytes per token that identify the model)
    k_cache_gib: float | None = _fact(Role.PREDICTED)
    max_mamba_cache_size: int | None = _fact(Role.PREDICTED)
    max_running_requests: int | None = _fact(Role.PREDICTED)
    context_len: int | None = _fact(Role.PREDICTED)
    max_model_len: int | None = _fact(Role.PREDICTED)
    max_concurrency: float | None = _fact(Role.PREDICTED)
    attention_block_size: int | None = _fact(Role.PREDICTED)
    # settings
    tp_size: int | None = _fact(Role.SETTING)
    #: the names found, in the order the log printed them: a plan lists its measured inputs so
    printed: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_values(cls, values: Mapping[str, Value]) -> LogFacts:
        """The record of `read_log`'s values; a name that is no field, or a value of the wrong
        type, is a bug in a quantity's declaration."""
        unknown = sorted(set(values) - set(ROLES))
        if unknown:
            raise ValueError(f"log quantities with no LogFacts field: {', '.join(unknown)}")
        wrong = sorted(n for n, v in values.items() if isinstance(v, bool) or not isinstance(v, _TYPES[n]))
        if wrong:
            raise TypeError(f"log quantities of the wrong type: {', '.join(wrong)}")
        return cls(**values, printed=tuple(values))  # type: ignore[arg-type]

    def measured_inputs(self) -> dict[str, float]:
        """The measured inputs, in the order the log printed them: what a plan lists as measured
        (the planners read the fields themselves)."""
        names = (*self.printed, *(name for name in ROLES if name not in self.printed))
        inputs = {name: getattr(self, name) for name in names if ROLES[name] is Role.INPUT}
        return {name: float(value) for name, value in inputs.items() if value is not None}


#: each quantity field's role
ROLES: dict[str, Role] = {f.name: f.metadata["role"] for f in fields(LogFacts) if f.metadata}
_TYPES: dict[str, Any] = get_type_hints(LogFacts)
