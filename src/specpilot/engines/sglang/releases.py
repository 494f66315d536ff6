"""SGLang's releases, as one table: what changed in its memory arithmetic from one release to
the next, and every release fact derived from it.

Each `SglangRelease` row holds the release-dependent constants and rules the planner needs;
the arithmetic itself lives in `specpilot.plan.sglang.quantities` and reads these fields
instead of branching on version strings. Rows were read from the released wheels
(`pip download sglang==X --no-deps`); the file:function each field comes from is named in
its comment. Each row is written as what changed since the row before it (`_after`).
Every release from 0.5.13 to 0.5.23 was read for the prefill capture's fields.

Derived here, stated nowhere else:
- `NEWEST_VERIFIED`: the last row's last release (the engine registry's `newest_version`);
- `CHECK_ACCEPTS` and `PLAN_MODELS`: the two release ranges, side by side;
- `STRATEGY_RENAME`: the 0.5.14 boundary the rules' eras (engines/sglang/rules.py) split at;
- `conformance_releases()`: every release with a flag table (tests/conformance/venvs.py);
- `MEASURED`: the real GPU starts of SGLang releases (read by `specpilot.plan.provenance`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from packaging.version import Version

from specpilot.engines.measured import MeasuredRelease
from specpilot.engines.rules import versions
from specpilot.engines.sglang.flags import release_tables
from specpilot.engines.sglang.postpool import FitRange, PostPoolFit
from specpilot.errors import UserError

#: Which prefill token counts are captured as CUDA graphs: the list up to the chunk (the MLA
#: backend's 2048, --max-total-tokens), then either clamped to an explicit --context-length
#: (server_args, "Clamp to context_length if explicitly set", 0.5.13-0.5.16) or kept up to
#: max_capture_requests x context_length, max_capture_requests = the request pool's size for
#: the breakable and piecewise backends (model_runner_components/cuda_graph_setup.py
#: `capture_prefill_graph`, 0.5.17+): at context 4,096 the whole 8,192-token chunk is captured
PrefillCaptureCap = Literal["context_clamp", "requests_x_context"]

#: How the speculative intermediate mamba state (one state per draft token per
#: running request, used while verifying) is charged against the KV/mamba budget.
IntermediateRule = Literal["reserve_first", "joint", "joint_padded"]


@dataclass(frozen=True)
class FlagRename:
    """A flag renamed in `release`: spelled `old` before it, `new` from it on."""

    release: str
    old: str
    new: str

    def flag_at(self, release: str) -> str:
        return self.new if Version(release) >= Version(self.release) else self.old

    @property
    def old_dest(self) -> str:
        return _dest(self.old)

    @property
    def new_dest(self) -> str:
        return _dest(self.new)


def _dest(flag: str) -> str:
    """argparse's dest of a long flag: `--mamba-scheduler-strategy` -> mamba_scheduler_strategy."""
    return flag.removeprefix("--").replace("-", "_")


#: 0.5.14 renamed the hybrid models' strategy flag, and its `auto` picks extra_buffer when
#: overlap or paging is wanted (before: no_buffer). The same release removed
#: SGLANG_ENABLE_SPEC_V2 and moved the draft into the memory profile: the rules' eras A and B
#: (engines/sglang/rules.py) split here.
STRATEGY_RENAME = FlagRename("0.5.14", "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy")


@dataclass(frozen=True)
class ReleaseSpan:
    """Releases `first` to `last`, inclusive; post and dev builds count as their base release."""

    first: str
    last: str

    def covers(self, version: str) -> bool:
        base = Version(Version(version).base_version)
        return Version(self.first) <= base <= Version(self.last)

    def __str__(self) -> str:
        return f"{self.first} to {self.last}"


@dataclass(frozen=True)
class SglangRelease(ReleaseSpan):
    """Memory rules of a range of SGLang releases (inclusive, post releases included)."""

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
    #: default on CUDA: measured on the H200, see `specpilot.plan.sglang.quantities.prefill_graph_gib`)
    prefill_graph: Literal["piecewise", "breakable"] = "piecewise"
    #: with `draft_in_profile`, whether the draft's KV is folded into the per-token cell
    #: (pool_configurator, read from the wheels) or allocated after the pools, out of the
    #: reserve: a real 0.5.17 on the H200 sized the target's KV pool with the target's cell
    #: alone (NEXTN on Qwen3.6-27B, 4 starts) and then allocated the draft's KV
    draft_kv_in_cell: bool = True
    #: Multimodal architectures that keep the prefill graph (every other multimodal model
    #: runs prefill eagerly): 0.5.17's `multimodal_breakable_cuda_graph_supported_model_archs`
    prefill_graph_multimodal_archs: frozenset[str] = frozenset()
    #: Memory allocated after the weight-load line and before the memory profile (the scheduler's
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
    #: Memory taken after the pools that no term itemizes (allocator slack, kernel
    #: workspaces, the warm-up forward's transients), hybrid / dense models, GiB: the estimate.
    #: Up to 0.5.16 from published logs (a 0.5.18 Qwen3.5-27B H100 log lost 2.87 GiB, its
    #: prefill graph included); 0.5.17 from the H200 matrix, where the prefill graph is its own
    #: term. A `post_pool_fit` that sets `unitemized_gib` replaces it (the term says "fitted").
    unitemized_hybrid_gib: float = 2.5
    unitemized_dense_gib: float = 0.6
    #: how the captured prefill token counts are bounded (`PrefillCaptureCap`)
    prefill_capture_cap: PrefillCaptureCap = "context_clamp"
    #: GiB that must be free when the prefill graph's capture begins, else an auto-selected
    #: prefill backend is skipped and prefill runs eagerly ("Disabling auto-selected prefill
    #: CUDA graph: only X GiB is free"): `_MIN_AUTO_PREFILL_CUDA_GRAPH_FREE_MEMORY_GB = 4.0`,
    #: read by `should_skip_auto_prefill_cuda_graph_for_memory` from
    #: `get_available_gpu_memory` (the device's free memory, other processes' use counted)
    #: after the weights, the pools and the eager runner's buffer (cuda_graph_setup.py,
    #: 0.5.16 and 0.5.17; not in 0.5.15 or 0.5.18+). 0: no gate
    prefill_graph_gate_gib: float = 0.0
    #: the post-pool terms fitted to this release's measured startup peaks, with the margins
    #: a plan keeps beyond them (`PostPoolFit`); None: every post-pool term is estimated
    post_pool_fit: PostPoolFit | None = None

    @property
    def strategy_flag(self) -> str:
        """`--mamba-scheduler-strategy` (<=0.5.13) or `--mamba-radix-cache-strategy` (>=0.5.14)."""
        return STRATEGY_RENAME.flag_at(self.first)


#: fields measured on a real start of one release (on the H200): a row after it does not
#: inherit them, it is unmeasured (the field's default) until its own starts say otherwise
CALIBRATIONS = (
    "pre_profile_gib",
    "rope_regrowth_share",
    "unitemized_hybrid_gib",
    "unitemized_dense_gib",
    "post_pool_fit",
)
_UNCALIBRATED = {f.name: f.default for f in fields(SglangRelease) if f.name in CALIBRATIONS}


def _after(previous: SglangRelease, first: str, last: str, **changed: Any) -> SglangRelease:
    """The row of releases `first` to `last`: `previous` with what changed in them, its
    calibrations (`CALIBRATIONS`) not carried over."""
    return replace(previous, **{**_UNCALIBRATED, "first": first, "last": last, **changed})


_R0510 = SglangRelease(
    first="0.5.10",
    last="0.5.10",
    spec_v2_default=False,
    spec_default_reserve_mib=4096,
    standalone_default_reserve_mib=6144,
    draft_in_profile=False,
    intermediate_rule="reserve_first",
    multimodal_reserve_mib=0,
    explicit_requests_cap="pool_estimate",
)
_R0511 = _after(_R0510, "0.5.11", "0.5.12", spec_v2_default=True)
_R0513 = _after(
    _R0511, "0.5.13", "0.5.13", intermediate_rule="joint", pre_profile_gib=0.03, rope_regrowth_share=0.36
)
_R0514 = _after(
    _R0513,
    STRATEGY_RENAME.release,
    "0.5.15",
    spec_v2_default=None,
    spec_default_reserve_mib=0,
    standalone_default_reserve_mib=0,
    draft_in_profile=True,
    explicit_requests_cap="half_tokens",
)
_R0516 = _after(_R0514, "0.5.16", "0.5.16", prefill_graph_gate_gib=4.0)
_R0517 = _after(
    _R0516,
    "0.5.17",
    "0.5.17",
    prefill_capture_cap="requests_x_context",
    intermediate_rule="joint_padded",
    prefill_graph="breakable",
    draft_kv_in_cell=False,
    prefill_graph_multimodal_archs=frozenset(
        {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"}
    ),
    pre_profile_gib=0.03,
    rope_regrowth_share=0.36,
    unitemized_hybrid_gib=0.6,
    # the H200 starts (tests/data/gpu-runs/sglang-0.5.17-h200-*, `gpu/sglang/fit.py`,
    # docs/gpu-validation.md): every start's lowest free memory fell in the prefill graph's
    # capture; tests/plan/test_sglang_fit.py refits the numbers from the samples
    post_pool_fit=PostPoolFit(
        stated_margin_gib=0.5,
        margin_reason=(
            "the low point of the same knobs moved 0.1 GiB between starts, one step (0.01) above "
            "the last fitting step left 0.06-0.09 GiB or failed, and the fit covers one model shape"
        ),
        source="docs/gpu-validation.md (the startup peak, fitted)",
        prefill_graph_bytes_per_token_hidden_layer=1.227,
        decode_graph_family=(0.375, 0.665),
        capture_transient_scale=2.856,
        # allocated inside the fitted phases: nothing is allocated between the pools' end and
        # the first capture
        attention_workspace_gib=0.0,
        unitemized_gib=0.0,
        highest_fraction=0.99,
        # a hybrid MoE's breakable prefill graph: 0.5.17 on the H200 printed "Capture target
        # prefill CUDA graph end ... mem usage=2.22 GB" for a Qwen3.6-35B-A3B-shaped model
        # (hidden 2048, 40 MoE layers, 8,192 tokens captured) with MTP at context 32,768:
        # 2.22 GiB / (8192 x 2048 x 40). One start, outside the range: planned with the
        # extrapolation margin
        moe_prefill_graph_bytes_per_token_hidden_layer=3.55,
        # the Qwen3.6-27B shape (text-only and with its vision tower: the same prefill graph,
        # 2.85-2.90 GiB printed) at context 8,192 with memory samples
        # (tests/data/gpu-runs/sglang-0.5.17-h200-*) and 32,768 to 262,144 with printed graph
        # sizes, 2.84-2.90 GiB at every context (tests/data/startup_logs/sglang-h200/r17-*),
        # on cards of 79.6, 95.6 and 139.8 GiB. The fitted terms do not read the context (the
        # captured sizes are the engine's own), but the range is where they were seen
        valid=FitRange(
            frozenset({"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"}),
            False,
            (8192, 262144),
            (79.6, 139.8),
        ),
        # the largest error seen on 0.5.17 starts the fit had not seen (H200, 2026-12-03): the
        # prefill graph of a hybrid MoE printed 2.22 GiB kept against 0.77 planned (1.45 GiB),
        # and a context of 4,096 tokens left 0.1 GiB at its low point against 1.62 promised
        # (1.52 GiB) before the captured sizes were the engine's own
        # (`quantities.captured_prefill_tokens`)
        extrapolation_margin_gib=1.5,
    ),
)
# the prefill graph and the draft's KV as the wheels read: 0.5.17's H200 findings are not assumed
_R0518 = _after(
    _R0517,
    "0.5.18",
    "0.5.22",
    multimodal_reserve_mib=100,
    prefill_graph="piecewise",
    draft_kv_in_cell=True,
    prefill_graph_multimodal_archs=frozenset(),
    prefill_graph_gate_gib=0.0,
)
_R0523 = _after(_R0518, "0.5.23", "0.5.23", post_capture_kv_sizing=True)

RELEASES: tuple[SglangRelease, ...] = (_R0510, _R0511, _R0513, _R0514, _R0516, _R0517, _R0518, _R0523)

#: the release `check` and `plan` assume when a pasted command does not say; a new row makes
#: its release the newest
NEWEST_VERIFIED = RELEASES[-1].last

# The two ranges, one beside the other:
#: the releases `check` accepts: it reads the newest flag table at or below the release, and a
#: release newer than the newest table is checked with that table and warned
#: `release-unverified`; outside the range `check` (and so `plan`) refuses with exit 2
CHECK_ACCEPTS = versions(f">={RELEASES[0].first},<0.6")
#: the releases `plan` models: the rows' span (0.5.24 is checked, with a warning, but not planned)
PLAN_MODELS = ReleaseSpan(RELEASES[0].first, RELEASES[-1].last)

#: real starts of SGLang releases the planner was compared with; append one when a new matrix
#: of starts is committed (docs/releases.md, "Record provenance")
MEASURED: tuple[MeasuredRelease, ...] = (
    # gpu/sglang/run_matrix.sh, 2026-11-30: 8 fitting starts + 4 recommendations started
    # out of sample each (tests/data/startup_logs/sglang-h200/r13-*)
    MeasuredRelease("sglang", "0.5.13.post1", "H200", 12, "docs/gpu-validation.md"),
    MeasuredRelease("sglang", "0.5.17", "H200", 12, "docs/gpu-validation.md"),
)


def conformance_releases() -> tuple[str, ...]:
    """The releases whose own validator the conformance suite runs: every flag table's."""
    return tuple(str(table.version) for table in release_tables())


def release_rules(version: str) -> SglangRelease:
    """The rules row for an SGLang release; dev/rc builds use their base release's row."""
    try:
        Version(version)
    except ValueError:
        raise UserError(
            f"{version!r} is not a release number", field="[engine] version", fix="e.g. 0.5.13"
        ) from None
    for row in RELEASES:
        if row.covers(version):
            return row
    raise UserError(
        f"SGLang {version} is outside the releases the planner models ({PLAN_MODELS})",
        field="[engine] version",
        fix=f"plan with a release from {PLAN_MODELS}",
    )


@dataclass(frozen=True)
class AdaptiveSteps:
    """`--speculative-adaptive`'s default draft-step candidates from release `first` on (the
    union over its batch-size slots, speculative/adaptive_spec_params.py
    DEFAULT_ADAPTIVE_CONFIG): the only `--speculative-num-steps` a start without
    `--speculative-adaptive-config` accepts, the middle one its default. Its largest slot
    ("64": [0]) stops drafting from 64 running requests on."""

    first: str
    candidate_steps: tuple[int, ...]


#: read in the 0.5.17, 0.5.19, 0.5.21 and 0.5.23 wheels (0.5.20 unread, taken as 0.5.19); the
#: flag exists from 0.5.11 (its flag table), whose adaptive code was not read
ADAPTIVE_STEPS: tuple[AdaptiveSteps, ...] = (
    AdaptiveSteps("0.5.17", (0, 1, 3, 7)),
    AdaptiveSteps("0.5.21", (0, 1, 3, 5, 7)),
)


def adaptive_steps(version: Version) -> tuple[int, ...]:
    """The release's adaptive draft-step candidates; () before the first row."""
    found: tuple[int, ...] = ()
    for row in ADAPTIVE_STEPS:
        if Version(row.first) <= version:
            found = row.candidate_steps
    return found
