"""The engines' tables of why a feature is unsupported (`engines.rules.Unsupported`): each row
fires on its own case with the engine's words, and the first row that applies is the reason."""

from __future__ import annotations

import pytest
from packaging.version import Version

from specpilot.engines.rules import Context, GpuFacts, Unsupported, first_unsupported
from specpilot.engines.sglang.rules import ADAPTIVE_UNSUPPORTED
from specpilot.engines.vllm.rules import EXTENSIBLE_UNSUPPORTED

ADAPTIVE_OK = {"speculative_algorithm": "NEXTN", "speculative_eagle_topk": 1, "enable_dp_attention": False}
EXTENSIBLE_OK = {"kv_cache_memory_bytes": None, "num_gpu_blocks_override": None}


def _ctx(engine: str, values: dict[str, object], env: dict[str, str] | None = None) -> Context:
    version = Version("0.5.23" if engine == "sglang" else "0.34.0")
    return Context(engine, version, values, frozenset(values), env or {}, None, GpuFacts())


@pytest.mark.parametrize(
    ("row", "changed", "reason"),
    [
        (0, {"speculative_algorithm": "NGRAM"}, "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)"),
        (1, {"speculative_eagle_topk": 4}, "speculative_eagle_topk=4 (only topk=1 is supported)"),
        (2, {"enable_dp_attention": True}, "attention DP is not supported (adaptive tier decisions are not "
         "synchronized across DP ranks)"),
    ],
)  # fmt: skip
def test_each_adaptive_row_gives_sglang_s_reason(row: int, changed: dict[str, object], reason: str) -> None:
    ctx = _ctx("sglang", {**ADAPTIVE_OK, **changed})
    assert ADAPTIVE_UNSUPPORTED[row].applies(ctx)
    assert first_unsupported(ADAPTIVE_UNSUPPORTED, ctx) == reason


def test_adaptive_is_supported_for_eagle_at_topk_one_or_unset() -> None:
    for values in (
        ADAPTIVE_OK,
        {**ADAPTIVE_OK, "speculative_eagle_topk": None, "speculative_algorithm": "eagle3"},
    ):
        assert first_unsupported(ADAPTIVE_UNSUPPORTED, _ctx("sglang", values)) is None


@pytest.mark.parametrize(
    ("changed", "env", "reason"),
    [
        ({}, {"VLLM_TARGET_DEVICE": "cpu"}, "it is only supported on CUDA and ROCm"),
        ({"kv_cache_memory_bytes": 8 << 30}, {}, "it sizes the KV cache from measured memory, which "
         "kv_cache_memory_bytes overrides"),
        ({"num_gpu_blocks_override": 512}, {}, "it sizes the KV cache from measured memory, which "
         "num_gpu_blocks_override overrides"),
    ],
)  # fmt: skip
def test_each_extensible_row_gives_vllm_s_reason(
    changed: dict[str, object], env: dict[str, str], reason: str
) -> None:
    assert (
        first_unsupported(EXTENSIBLE_UNSUPPORTED, _ctx("vllm", {**EXTENSIBLE_OK, **changed}, env)) == reason
    )
    assert first_unsupported(EXTENSIBLE_UNSUPPORTED, _ctx("vllm", EXTENSIBLE_OK)) is None


def test_the_first_row_that_applies_is_the_reason() -> None:
    rows = (
        Unsupported(lambda ctx: False, "never"),
        Unsupported(lambda ctx: True, "a={a}"),
        Unsupported(lambda ctx: True, "later"),
    )
    assert first_unsupported(rows, _ctx("sglang", {"a": 3})) == "a=3"
    # the engine's order: DP attention and a wrong algorithm together name the algorithm
    both = _ctx("sglang", {**ADAPTIVE_OK, "speculative_algorithm": "NGRAM", "enable_dp_attention": True})
    assert (first_unsupported(ADAPTIVE_UNSUPPORTED, both) or "").startswith("speculative_algorithm=NGRAM")
