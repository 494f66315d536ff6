"""What changed in SGLang's memory arithmetic from one release to the next, as data.

Each `SglangRelease` row holds the release-dependent constants and rules the
planner needs; the arithmetic itself lives in `specpilot.plan.sglang_quantities` and
reads these fields instead of branching on version strings. Rows were read from the released
wheels (`pip download sglang==X --no-deps`); the file:function each field comes
from is named in its comment. 0.5.15 was not downloaded and is assumed to match
0.5.14/0.5.16 (identical on every field below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

from specpilot.errors import UserError

#: How the speculative intermediate mamba state (one state per draft token per
#: running request, used while verifying) is charged against the KV/mamba budget.
IntermediateRule = Literal["reserve_first", "joint", "joint_padded"]


@dataclass(frozen=True)
class SglangRelease:
    """Memory rules of a range of SGLang releases (inclusive, post releases included)."""

    first: str
    last: str
    #: `--mamba-scheduler-strategy` (<=0.5.13) or `--mamba-radix-cache-strategy` (>=0.5.14)
    strategy_flag: str
    #: SGLANG_ENABLE_SPEC_V2 default: spec v2 keeps the overlap scheduler on for EAGLE/NEXTN.
    #: None: the variable was removed and spec v2 is always on (>=0.5.14, speculative_hook.py).
    spec_v2_default: bool | None
    #: MiB the default mem_fraction_static adds for EAGLE/NEXTN draft model + graphs
    #: (server_args._handle_gpu_memory_settings; removed in 0.5.14, when draft weights
    #: and draft KV moved into the profiled budget)
    spec_default_reserve_mib: int
    #: the same allowance for STANDALONE (a separate draft model): 6 GiB before 0.5.14
    standalone_default_reserve_mib: int
    #: draft weights loaded before the target's memory profile and draft KV folded into
    #: the per-token cell size (pool_configurator.DefaultPoolConfigurator, >=0.5.14);
    #: before that both come out of the runtime reserve
    draft_in_profile: bool
    #: model_runner_kv_cache_mixin.handle_max_mamba_cache: 0.5.10-0.5.12 subtract
    #: per_req * max_running_requests * D before splitting; 0.5.13 solves the split jointly;
    #: 0.5.17+ also counts the pool's padding slot (+1) on both buffers
    intermediate_rule: IntermediateRule
    #: MiB of the KV budget reserved for multimodal runtime buffers
    #: (kv_cache_configurator.mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB=100, >=0.5.18)
    multimodal_reserve_mib: int
    #: an explicit --max-running-requests is capped by the pool estimate (<=0.5.13) or by
    #: half the KV tokens (>=0.5.14) (`_resolve_max_num_reqs`)
    explicit_requests_cap: Literal["pool_estimate", "half_tokens"]
    #: How the prefill CUDA graph is captured and what it holds: "piecewise" (torch.compile
    #: pieces, SGLang's own allowance of 8 MiB per captured size) or "breakable" (0.5.17's
    #: default on CUDA: measured on the H200, see `specpilot.plan.sglang_quantities.prefill_graph_gib`)
    prefill_graph: Literal["piecewise", "breakable"] = "piecewise"
    #: with `draft_in_profile`, whether the draft's KV is folded into the per-token cell
    #: (pool_configurator, read from the wheels) or allocated after the pools, out of the
    #: reserve: a real 0.5.17 on the H200 sized the target's KV pool with the target's cell
    #: alone (NEXTN on Qwen3.6-27B, 4 starts) and then allocated the draft's KV
    draft_kv_in_cell: bool = True
    #: Multimodal architectures that keep the prefill graph (every other multimodal model
    #: runs prefill eagerly): 0.5.17's `multimodal_breakable_cuda_graph_supported_model_archs`
    prefill_graph_multimodal_archs: frozenset[str] = frozenset()
    #: Memory taken after the pools that no term itemizes (allocator slack, kernel
    #: workspaces, the warm-up forward's transients), hybrid / dense models, GiB. Up to 0.5.16
    #: from published logs (a 0.5.18 Qwen3.5-27B H100 log lost 2.87 GiB, its prefill graph
    #: included); 0.5.17 from the H200 matrix, where the prefill graph is its own term.
    #: allocated after the weight-load line and before the memory profile (the scheduler's
    #: and the draft worker's small buffers): 0.03 GiB in the real 0.5.13.post1 and 0.5.17
    #: starts on the H200 at --context-length 32768, where nothing below regrows; unmeasured
    #: elsewhere (a 0.5.14 TP4 log shows none)
    pre_profile_gib: float = 0.0
    #: SGLANG_ENABLE_POST_CAPTURE_KV_SIZING (off by default) is modelled: the default
    #: fraction keeps only 1.5 GiB + parallel slack (arg_groups/memory_hook.py), and after
    #: graph capture the KV pool is resized to what is then free less the headroom
    #: free x (1 - fraction), at least the activation reserve for hybrid models or when
    #: decode graphs stop below max_running_requests (kv_pool_runtime.py
    #: compute_post_capture_kv_resize). Read in 0.5.23; 0.5.18-0.5.22 read the variable too
    #: (server_args / memory_hook), but their resize path was not read.
    #: Without the GPU's memory 0.5.20+ fall back to fraction 0.95 (0.88 before); a spec
    #: always gives [gpu] memory_gib, so no row needs that fallback.
    post_capture_kv_sizing: bool = False
    #: after the weights, `reserve_rope_cache_for_long_sequences` regrows the rotary cos/sin
    #: cache when the context (+ speculative room + 256) reaches the cache's positions; the
    #: regrowth keeps this share of the cache's size in use (measured on the H200: 23 MiB of
    #: the 64 MiB Qwen3.6-27B cache, the 320 KV tokens a 262,144-token context loses against
    #: 32,768 in both releases); 0: not measured for the release
    rope_regrowth_share: float = 0.0
    unitemized_hybrid_gib: float = 2.5
    unitemized_dense_gib: float = 0.6


RELEASES: tuple[SglangRelease, ...] = (
    SglangRelease(
        first="0.5.10",
        last="0.5.10",
        strategy_flag="--mamba-scheduler-strategy",
        spec_v2_default=False,
        spec_default_reserve_mib=4096,
        standalone_default_reserve_mib=6144,
        draft_in_profile=False,
        intermediate_rule="reserve_first",
        multimodal_reserve_mib=0,
        explicit_requests_cap="pool_estimate",
    ),
    SglangRelease(
        first="0.5.11",
        last="0.5.12",
        strategy_flag="--mamba-scheduler-strategy",
        spec_v2_default=True,
        spec_default_reserve_mib=4096,
        standalone_default_reserve_mib=6144,
        draft_in_profile=False,
        intermediate_rule="reserve_first",
        multimodal_reserve_mib=0,
        explicit_requests_cap="pool_estimate",
    ),
    SglangRelease(
        first="0.5.13",
        last="0.5.13",
        strategy_flag="--mamba-scheduler-strategy",
        spec_v2_default=True,
        spec_default_reserve_mib=4096,
        standalone_default_reserve_mib=6144,
        draft_in_profile=False,
        intermediate_rule="joint",
        multimodal_reserve_mib=0,
        explicit_requests_cap="pool_estimate",
        pre_profile_gib=0.03,
        rope_regrowth_share=0.36,
    ),
    SglangRelease(
        first="0.5.14",
        last="0.5.16",
        strategy_flag="--mamba-radix-cache-strategy",
        spec_v2_default=None,
        spec_default_reserve_mib=0,
        standalone_default_reserve_mib=0,
        draft_in_profile=True,
        intermediate_rule="joint",
        multimodal_reserve_mib=0,
        explicit_requests_cap="half_tokens",
    ),
    SglangRelease(
        first="0.5.17",
        last="0.5.17",
        strategy_flag="--mamba-radix-cache-strategy",
        spec_v2_default=None,
        spec_default_reserve_mib=0,
        standalone_default_reserve_mib=0,
        draft_in_profile=True,
        intermediate_rule="joint_padded",
        multimodal_reserve_mib=0,
        explicit_requests_cap="half_tokens",
        prefill_graph="breakable",
        draft_kv_in_cell=False,
        pre_profile_gib=0.03,
        rope_regrowth_share=0.36,
        prefill_graph_multimodal_archs=frozenset(
            {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"}
        ),
        unitemized_hybrid_gib=0.6,
        unitemized_dense_gib=0.6,
    ),
    SglangRelease(
        first="0.5.18",
        last="0.5.22",
        strategy_flag="--mamba-radix-cache-strategy",
        spec_v2_default=None,
        spec_default_reserve_mib=0,
        standalone_default_reserve_mib=0,
        draft_in_profile=True,
        intermediate_rule="joint_padded",
        multimodal_reserve_mib=100,
        explicit_requests_cap="half_tokens",
    ),
    SglangRelease(
        first="0.5.23",
        last="0.5.23",
        strategy_flag="--mamba-radix-cache-strategy",
        spec_v2_default=None,
        spec_default_reserve_mib=0,
        standalone_default_reserve_mib=0,
        draft_in_profile=True,
        intermediate_rule="joint_padded",
        multimodal_reserve_mib=100,
        explicit_requests_cap="half_tokens",
        post_capture_kv_sizing=True,
    ),
)

SUPPORTED_RANGE = f"{RELEASES[0].first} to {RELEASES[-1].last}"


def release_rules(version: str) -> SglangRelease:
    """The rules row for an SGLang release; dev/rc builds use their base release's row."""
    try:
        parsed = Version(version)
    except ValueError:
        raise UserError(
            f"{version!r} is not a release number", field="[engine] version", fix="e.g. 0.5.13"
        ) from None
    base = Version(parsed.base_version)  # post/dev builds follow their release's rules
    for row in RELEASES:
        if Version(row.first) <= base <= Version(row.last):
            return row
    raise UserError(
        f"SGLang {version} is outside the releases the planner models ({SUPPORTED_RANGE})",
        field="[engine] version",
        fix=f"plan with a release from {SUPPORTED_RANGE}",
    )
