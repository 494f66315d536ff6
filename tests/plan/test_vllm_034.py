"""vLLM 0.34 planned from its own release line: the KV cache sized after CUDA graph capture at
--gpu-memory-utilization 1.0 by default (0.92 without), blocks of 64 tokens, and the
deprecated --mamba-cache-mode doing nothing (engines/vllm/releases.py, 0.34.0's sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.plan import make_plan
from specpilot.plan.types import Plan
from specpilot.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
#: the Qwen3.6-27B-shaped hybrid of the H200 matrix, without its fixed utilization
SPEC = REPO / "gpu" / "specs" / "h200-hybrid-96.toml"


def _plan(version: str, *extra: str) -> Plan:
    spec = load_spec(SPEC)
    args = [a for a in spec.engine.args if a not in ("--gpu-memory-utilization", "0.6154", "--enforce-eager")]
    engine = spec.engine.model_copy(update={"version": version, "args": [*args, *extra]})
    return make_plan(resolve(spec.model_copy(update={"engine": engine})))


def test_the_kv_cache_is_sized_after_capture_from_the_whole_gpu() -> None:
    new, old = _plan("0.34.0"), _plan("0.33.0")
    assert new.fits and old.fits
    assert new.memory_fraction == 1.0 and old.memory_fraction == 0.92
    # the same terms out of 8% more of the card: nothing held back, 11 GiB more for the pool
    assert new.reserve_gib == pytest.approx(0.0, abs=0.01)
    assert old.reserve_gib == pytest.approx(0.08 * 139.8007, abs=0.01)
    assert new.kv_tokens > 1.1 * old.kv_tokens
    assert any("KV sized after CUDA graph capture" in note for note in new.notes)
    assert not any("KV sized after CUDA graph capture" in note for note in old.notes)
    # the hybrid's attention block is aligned up from 64 tokens now, from 16 before
    new_block, old_block = (int(p.notes[0].split(" blocks of ")[1].split()[0]) for p in (new, old))
    assert new_block % 64 == 0 and old_block % 64 != 0 and old_block % 16 == 0


def test_without_the_extensible_cache_the_estimate_default_holds() -> None:
    off = _plan("0.34.0", "--no-enable-extensible-kv-cache")
    assert off.memory_fraction == 0.92
    assert not any("KV sized after CUDA graph capture" in note for note in off.notes)
    fixed = _plan("0.34.0", "--gpu-memory-utilization", "0.8")
    assert fixed.memory_fraction == 0.8


def test_mamba_cache_mode_changes_nothing_in_034() -> None:
    plain, moded = _plan("0.34.0"), _plan("0.34.0", "--mamba-cache-mode", "align")
    assert moded.kv_tokens == plain.kv_tokens and moded.state_slots == plain.state_slots


def _graph_gib(plan: Plan) -> float:
    return next(term.gib for term in plan.terms if term.name == "CUDA graph memory")


def test_capture_sizes_split_by_phase_do_not_follow_max_num_seqs() -> None:
    """0.34 captures prefill graphs up to 512 tokens whatever --max-num-seqs says; 0.33's
    widest graph is 2 x --max-num-seqs (at most 512)."""
    new = _plan("0.34.0", "--max-num-seqs", "8")
    old = _plan("0.33.0", "--max-num-seqs", "8")
    assert _graph_gib(new) == pytest.approx(0.05 + 0.9, abs=0.01)
    assert _graph_gib(old) == pytest.approx(0.05 + 0.9 * 16 / 512, abs=0.01)
    # with --max-num-batched-tokens below 512 the prefill graphs stop there
    small = _plan("0.34.0", "--max-num-seqs", "8", "--max-num-batched-tokens", "256")
    assert _graph_gib(small) == pytest.approx(0.05 + 0.9 * 256 / 512, abs=0.01)
