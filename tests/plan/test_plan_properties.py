"""Properties every plan keeps, for SGLang and vLLM, on dense and hybrid shapes, with and
without an MTP draft: more memory fraction or a larger card never gives fewer KV tokens,
and the memory table adds up to the budget it splits.

The exceptions are the engines' own: SGLang rounds its state-slot count down, so one more
slot can take up to one slot's bytes (state, plus its intermediate states when speculating)
from the KV pool; and both engines pick larger batch and graph defaults on larger GPU
classes, which is why the card-size properties pin those flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpilot.check.resolved import resolve
from specpilot.engines.sglang.releases import release_rules
from specpilot.models.shape import load_model_shape
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.planner import AFTER_CAPTURE, CAPTURE_PEAK, PEAK, Sizing, planner_settings, size
from specpilot.plan.types import GIB, Plan
from specpilot.plan.vllm.allocation import allocate
from specpilot.plan.vllm.planner import resolve_inputs
from specpilot.spec import Spec

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "examples" / "models"
#: a few bytes of float rounding when GiB terms are summed
SUM_TOLERANCE_GIB = 64 / GIB
FEW = settings(max_examples=15, deadline=None, database=None, derandomize=True)


@dataclass(frozen=True)
class Case:
    engine: str
    version: str
    model: str
    args: tuple[str, ...]


MTP_SGLANG = ("--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4")
SGLANG_CASES = {
    "dense": Case("sglang", "0.5.17", "qwen3-8b", ()),
    "moe": Case("sglang", "0.5.13", "qwen3-30b-a3b", ()),
    "hybrid-0.5.13": Case("sglang", "0.5.13", "qwen3.6-27b", ()),
    "hybrid-0.5.17": Case("sglang", "0.5.17", "qwen3.6-27b", ()),
    "hybrid-mtp-0.5.10": Case(
        "sglang", "0.5.10", "qwen3.6-27b", (*MTP_SGLANG, "--mamba-scheduler-strategy", "extra_buffer")
    ),
    "hybrid-mtp-0.5.13": Case(
        "sglang", "0.5.13", "qwen3.6-27b", (*MTP_SGLANG, "--mamba-scheduler-strategy", "extra_buffer")
    ),
    "hybrid-mtp-0.5.14": Case("sglang", "0.5.14", "qwen3.6-27b", MTP_SGLANG),
    "hybrid-mtp-0.5.17": Case("sglang", "0.5.17", "qwen3.6-27b", MTP_SGLANG),
}
MTP_VLLM = ("--speculative-config", '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}')
VLLM_CASES = {
    "dense": Case("vllm", "0.26.0", "qwen3-8b-vllm", ("--max-model-len", "8192")),
    "hybrid": Case("vllm", "0.26.0", "qwen3.6-27b-vllm", ("--max-model-len", "8192")),
    "hybrid-mtp": Case("vllm", "0.26.0", "qwen3.6-27b-vllm", ("--max-model-len", "8192", *MTP_VLLM)),
    "hybrid-moe": Case("vllm", "0.32.0", "qwen3.6-35b-a3b-vllm", ("--max-model-len", "16384")),
}
#: the batch and graph defaults each engine picks by GPU class, pinned for card-size properties
SGLANG_PINNED = ("--chunked-prefill-size", "8192", "--cuda-graph-max-bs", "256")
VLLM_PINNED = ("--max-num-seqs", "256", "--max-num-batched-tokens", "8192")


def _spec(case: Case, memory_gib: float, *extra: str) -> Spec:
    return Spec.model_validate(
        {
            "name": "property",
            "model": {"path": str(MODELS / case.model)},
            "gpu": {"memory_gib": memory_gib},
            "engine": {"name": case.engine, "version": case.version, "args": [*case.args, *extra]},
        }
    )


def _sizing(case: Case, memory_gib: float, *extra: str) -> Sizing:
    """SGLang's sizing of a case, as `plan_sglang` runs it (free memory and weights estimated)."""
    spec = _spec(case, memory_gib, *extra)
    shape, args = plan_inputs(spec)
    s = planner_settings(spec, shape, args)
    return size(
        shape,
        s,
        release_rules(case.version),
        free_before_load_gib=q.free_before_load_gib(memory_gib, s.tp_size),
        weights_gib=q.target_weights_gib(shape, s),
    )


def _one_slot_tokens(z: Sizing) -> int:
    """KV tokens one more state slot can take: its state and, speculating, its draft tokens'
    intermediate states (0 for dense models), plus the page the count is rounded to."""
    s = z.settings
    slot_bytes = z.state_bytes_per_request * (1 + s.num_draft_tokens)
    return math.ceil(slot_bytes / z.pool_cell_bytes) + s.page_size


@pytest.mark.parametrize("name", sorted(SGLANG_CASES))
@FEW
@given(low=st.floats(0.55, 0.95), high=st.floats(0.55, 0.95))
def test_sglang_kv_tokens_do_not_fall_with_the_fraction(name: str, low: float, high: float) -> None:
    low, high = sorted((round(low, 3), round(high, 3)))
    case = SGLANG_CASES[name]
    smaller = _sizing(case, 141.0, "--mem-fraction-static", str(low))
    larger = _sizing(case, 141.0, "--mem-fraction-static", str(high))
    assert larger.kv_tokens >= smaller.kv_tokens - _one_slot_tokens(smaller)


@pytest.mark.parametrize("name", ["hybrid-0.5.17", "hybrid-mtp-0.5.13"])
@FEW
@given(low=st.floats(0.55, 0.95), high=st.floats(0.55, 0.95))
def test_sglang_kv_tokens_grow_with_the_fraction_at_a_fixed_state_pool(
    name: str, low: float, high: float
) -> None:
    """With --max-mamba-cache-size the slot count is given: no rounding step, no exception."""
    low, high = sorted((round(low, 3), round(high, 3)))
    pinned = ("--max-mamba-cache-size", "40")
    case = SGLANG_CASES[name]
    smaller = _sizing(case, 141.0, *pinned, "--mem-fraction-static", str(low))
    larger = _sizing(case, 141.0, *pinned, "--mem-fraction-static", str(high))
    assert larger.kv_tokens >= smaller.kv_tokens


@pytest.mark.parametrize("name", sorted(SGLANG_CASES))
@FEW
@given(small_gib=st.floats(40.0, 200.0), large_gib=st.floats(40.0, 200.0))
def test_sglang_a_larger_card_never_gives_fewer_kv_tokens(
    name: str, small_gib: float, large_gib: float
) -> None:
    small_gib, large_gib = sorted((round(small_gib, 1), round(large_gib, 1)))
    case = SGLANG_CASES[name]
    small = _sizing(case, small_gib, *SGLANG_PINNED)
    large = _sizing(case, large_gib, *SGLANG_PINNED)
    assert large.kv_tokens >= small.kv_tokens - _one_slot_tokens(small)


def _budget_terms(plan: Plan) -> tuple[float, float]:
    """(free memory before the weights load, the sum of what the plan splits it into: weights,
    draft, reserve, pools, KV), from the plan's own memory table."""
    names = [t.name for t in plan.terms]
    assert names[0] == "free before weights load"
    kv_index = next(i for i, name in enumerate(names) if name.startswith("KV cache:"))
    return plan.terms[0].gib, sum(t.gib for t in plan.terms[1 : kv_index + 1])


@pytest.mark.parametrize("name", sorted(SGLANG_CASES))
@pytest.mark.parametrize("memory_gib", [120.0, 141.0])
def test_sglang_terms_add_up_to_the_free_memory(name: str, memory_gib: float) -> None:
    """Free memory = weights + draft + reserve + state pool + intermediate states + KV cache,
    short of the KV pool's rounding to whole pages (less than a page of tokens)."""
    spec = _spec(SGLANG_CASES[name], memory_gib)
    plan = make_plan(resolve(spec))
    assert plan.kv_tokens > 0
    free, parts = _budget_terms(plan)
    z = _sizing(SGLANG_CASES[name], memory_gib)
    page_gib = z.settings.page_size * z.pool_cell_bytes / GIB
    assert 0 <= free - parts < page_gib + SUM_TOLERANCE_GIB


@pytest.mark.parametrize("name", sorted(SGLANG_CASES))
def test_sglang_reserve_need_is_its_itemized_terms(name: str) -> None:
    """What must fit in the reserve is every term after the pools, of the peaks (which never
    coincide) only the largest."""
    plan = make_plan(resolve(_spec(SGLANG_CASES[name], 141.0)))
    names = [t.name for t in plan.terms]
    after_pools = plan.terms[next(i for i, n in enumerate(names) if n.startswith("KV cache:")) + 1 :]
    steady = sum(t.gib for t in after_pools if t.note not in (PEAK, CAPTURE_PEAK))
    peaks = [t.gib for t in after_pools if t.note == PEAK]
    assert peaks, "the activation peak is always itemized"
    needed = steady + max(peaks)
    # a fit's prefill capture transient comes before the decode-side graphs are captured
    capture = [t.gib for t in after_pools if t.note == CAPTURE_PEAK]
    if capture:
        after = sum(t.gib for t in after_pools if t.note == AFTER_CAPTURE)
        needed = max(needed, steady - after + max(capture))
    assert plan.reserve_needed_gib == pytest.approx(needed, abs=SUM_TOLERANCE_GIB)


def _vllm_kv_tokens(case: Case, memory_gib: float, utilization: float, *extra: str) -> int:
    plan = make_plan(resolve(_spec(case, memory_gib, "--gpu-memory-utilization", f"{utilization}", *extra)))
    return plan.kv_tokens


@pytest.mark.parametrize("name", sorted(VLLM_CASES))
@FEW
@given(low=st.floats(0.3, 0.95), high=st.floats(0.3, 0.95))
def test_vllm_kv_tokens_do_not_fall_with_the_utilization(name: str, low: float, high: float) -> None:
    low, high = sorted((round(low, 4), round(high, 4)))
    case = VLLM_CASES[name]
    assert _vllm_kv_tokens(case, 80.0, high) >= _vllm_kv_tokens(case, 80.0, low)


@pytest.mark.parametrize("name", sorted(VLLM_CASES))
@FEW
@given(small_gib=st.floats(24.0, 200.0), large_gib=st.floats(24.0, 200.0))
def test_vllm_a_larger_card_never_gives_fewer_kv_tokens(
    name: str, small_gib: float, large_gib: float
) -> None:
    small_gib, large_gib = sorted((round(small_gib, 1), round(large_gib, 1)))
    case = VLLM_CASES[name]
    small = _vllm_kv_tokens(case, small_gib, 0.9, *VLLM_PINNED)
    assert _vllm_kv_tokens(case, large_gib, 0.9, *VLLM_PINNED) >= small


@pytest.mark.parametrize("name", sorted(VLLM_CASES))
@pytest.mark.parametrize("memory_gib", [48.0, 80.0, 141.0])
def test_vllm_terms_add_up_to_the_card(name: str, memory_gib: float) -> None:
    """Card = reserve + requested, and requested = weights + peak activation + non-torch +
    CUDA graphs + available KV cache memory, to the byte (vLLM's own subtraction)."""
    plan = make_plan(resolve(_spec(VLLM_CASES[name], memory_gib)))
    terms = {t.name: t.gib for t in plan.terms}
    requested = terms.pop("requested (total x gpu_memory_utilization)")
    assert set(terms) == {
        "weights",
        "peak activation",
        "non-torch memory",
        "CUDA graph memory",
        "available KV cache memory",
    }
    assert sum(terms.values()) == pytest.approx(requested, abs=SUM_TOLERANCE_GIB)
    assert requested + plan.reserve_gib == pytest.approx(memory_gib, abs=SUM_TOLERANCE_GIB)


@pytest.mark.parametrize("name", sorted(VLLM_CASES))
@pytest.mark.parametrize("utilization", [0.6, 0.75, 0.9])
def test_vllm_block_pool_fills_the_kv_memory_to_one_block(name: str, utilization: float) -> None:
    """The pool is whole blocks (one page in each layer of a group): it never exceeds the
    available KV memory and leaves less than one block of it unused."""
    spec = _spec(VLLM_CASES[name], 141.0, "--gpu-memory-utilization", f"{utilization}")
    shape, args = plan_inputs(spec)
    alloc = allocate(resolve_inputs(spec, shape, args))
    block_bytes = alloc.page_bytes * alloc.groups.group_size_layers
    assert alloc.num_blocks > 0
    assert alloc.num_blocks * block_bytes <= alloc.available_kv_bytes < (alloc.num_blocks + 1) * block_bytes
    # and a larger utilization is the same pool plus whole blocks
    larger = allocate(replace(resolve_inputs(spec, shape, args), gpu_memory_utilization=utilization + 0.05))
    assert larger.num_blocks >= alloc.num_blocks
    assert larger.page_bytes == alloc.page_bytes


def test_the_shapes_are_the_kinds_named() -> None:
    """The cases cover what the properties claim: dense, MoE and hybrid shapes, MTP heads."""
    dense = load_model_shape(MODELS / "qwen3-8b")
    hybrid = load_model_shape(MODELS / "qwen3.6-27b")
    moe = load_model_shape(MODELS / "qwen3-30b-a3b")
    hybrid_moe = load_model_shape(MODELS / "qwen3.6-35b-a3b-vllm")
    assert not dense.is_hybrid and not dense.is_moe
    assert hybrid.is_hybrid and hybrid.mtp_num_layers > 0
    assert moe.is_moe and not moe.is_hybrid
    assert hybrid_moe.is_hybrid and hybrid_moe.is_moe
