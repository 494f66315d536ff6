"""SGLang's argument validation, re-expressed as rules (in the order the engine runs them).

Sources: `ServerArgs.__post_init__` and its `_handle_*` chain (0.5.10.post1, 0.5.13.post1),
`arg_groups/speculative_hook.py` (0.5.13.post1+), the 0.5.14 mamba handlers and 0.5.23's
resolution pipeline (`arg_groups/overrides.py`, `mamba_hook.py`, `model_hook.py`).
Two eras matter for hybrid models, split at `STRATEGY_RENAME` (engines/sglang/releases.py):
until 0.5.13.post1 the flag is `--mamba-scheduler-strategy` and `auto` means `no_buffer`; from
0.5.14 it is `--mamba-radix-cache-strategy` and `auto` picks `extra_buffer` when overlap or
paging is wanted.
"""

from __future__ import annotations

from collections.abc import Callable

from specpilot.engines.context_len import sglang_context_len as context_len
from specpilot.engines.fix import Fix
from specpilot.engines.reasoning import missing_parser_rule
from specpilot.engines.rules import (
    Context,
    Predicate,
    Rule,
    Unsupported,
    all_of,
    any_of,
    arch_in,
    env_true,
    eq,
    first_unsupported,
    given,
    int_gt,
    longer_than_model,
    not_,
    one_of,
    set_to,
    truthy,
    unset,
    versions,
)
from specpilot.engines.sglang.gpu import cuda_graph_max_bs, gpu_defaults
from specpilot.engines.sglang.models import (
    EXTRA_BUFFER_ARCHS,
    MAMBA_RADIX_ARCHS,
    SPEC_PARAMS_BY_ARCH,
    SPEC_PARAMS_DEFAULT,
)
from specpilot.engines.sglang.releases import ADAPTIVE_STEPS, RELEASES, STRATEGY_RENAME, adaptive_steps

E = "sglang"
ALL = versions(f">={RELEASES[0].first}")
# the two eras split at the strategy flag's rename (engines/sglang/releases.py)
ERA_A = ALL & versions(f"<{STRATEGY_RENAME.release}")  # --mamba-scheduler-strategy, auto -> no_buffer
ERA_B = versions(f">={STRATEGY_RENAME.release}")  # --mamba-radix-cache-strategy, auto -> extra_buffer
STRAT_A = STRATEGY_RENAME.old_dest
STRAT_B = STRATEGY_RENAME.new_dest
EXTRA = ("extra_buffer", "extra_buffer_lazy")

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")
SPEC_ALGOS = (*EAGLE_FAMILY, "NGRAM", "DFLASH")
#: algorithm names each release accepts (NEXTN is an alias of EAGLE in all of them)
VALID_ALGOS_A10 = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
VALID_ALGOS = (*VALID_ALGOS_A10, "DFLASH", "FROZEN_KV_MTP")
#: algorithms added later, with the first release whose SpeculativeAlgorithm enum has them
#: (speculative/spec_info.py of 0.5.19 and 0.5.20)
DSPARK = versions(">=0.5.19")
UNO = versions(">=0.5.20")
LATER_ALGOS = {"DSPARK": DSPARK, "UNO": UNO}
#: the releases whose adaptive speculation was read (engines/sglang/releases.py ADAPTIVE_STEPS)
ADAPTIVE = versions(f">={ADAPTIVE_STEPS[0].first}")

hybrid = arch_in(MAMBA_RADIX_ARCHS)
radix_on = not_(truthy("disable_radix_cache"))
spec_on = not_(unset("speculative_algorithm"))
#: set by the user: the mamba checks run before the speculative hook fills in defaults
draft_given = not_(unset("speculative_num_draft_tokens"))
# before the speculative hook upper-cases and maps it, the raw name decides the mamba checks


def _algo(ctx: Context) -> str:
    return str(ctx.get("speculative_algorithm") or "").upper()


def _algo_known(ctx: Context) -> bool:
    later = LATER_ALGOS.get(_algo(ctx))
    return _algo(ctx) in VALID_ALGOS or (later is not None and later.contains(ctx.version, prereleases=True))


def algo_in(names: tuple[str, ...]) -> Predicate:
    return lambda ctx: _algo(ctx) in names


def _strategy_fix(dest_flag: str, value: str, env: dict[str, str] | None = None) -> Fix:
    return Fix(args=(dest_flag, value), env=env or {})


def _auto_strategy_b(ctx: Context) -> dict[str, object]:
    """0.5.14+: extra_buffer when overlap or paging is wanted and the model supports it."""
    wants_overlap = not ctx.get("disable_overlap_schedule")
    page = ctx.get("page_size")
    wants_paging = isinstance(page, int) and page > 1
    supports = ctx.architecture in EXTRA_BUFFER_ARCHS and ctx.get("linear_attn_backend") == "triton"
    if (wants_overlap or wants_paging) and supports:
        return {STRAT_B: "extra_buffer"}
    return {STRAT_B: "no_buffer", "disable_overlap_schedule": True}


def _overlap_fix(ctx: Context) -> Fix:
    """What keeps overlap scheduling: extra_buffer needs the triton linear-attention backend on
    the models that support it; elsewhere only turning the radix cache off does."""
    if ctx.architecture in EXTRA_BUFFER_ARCHS:
        return Fix(args=("--linear-attn-backend", "triton"))
    return Fix(
        args=("--disable-radix-cache",),
        text="--disable-radix-cache keeps overlap scheduling at the cost of prefix reuse",
    )


def _adaptive_candidates(ctx: Context) -> tuple[int, ...]:
    return adaptive_steps(ctx.version)


#: why the release turns --speculative-adaptive off, in `adaptive_unsupported_reason`'s order
#: (NEXTN is EAGLE by then)
ADAPTIVE_UNSUPPORTED = (
    Unsupported(
        not_(algo_in(("EAGLE", "EAGLE3", "NEXTN"))),
        "speculative_algorithm={speculative_algorithm} (only EAGLE/EAGLE3 are supported)",
    ),
    Unsupported(
        all_of(not_(unset("speculative_eagle_topk")), not_(eq("speculative_eagle_topk", 1))),
        "speculative_eagle_topk={speculative_eagle_topk} (only topk=1 is supported)",
    ),
    Unsupported(
        truthy("enable_dp_attention"),
        "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)",
    ),
)


def _adaptive_unsupported(ctx: Context) -> str | None:
    return first_unsupported(ADAPTIVE_UNSUPPORTED, ctx)


def _nearest_candidate(ctx: Context) -> int:
    steps = ctx.get("speculative_num_steps")
    wanted = steps if isinstance(steps, int) else 3
    return min((c for c in _adaptive_candidates(ctx) if c > 0), key=lambda c: (abs(c - wanted), c), default=1)


def _adaptive_params(ctx: Context) -> dict[str, object]:
    """topk 1 when unset, the middle candidate when no steps are given, steps + 1 draft tokens."""
    candidates = _adaptive_candidates(ctx)
    steps = ctx.get("speculative_num_steps")
    if steps is None and candidates:
        steps = candidates[len(candidates) // 2]
    found: dict[str, object] = {"speculative_num_steps": steps}
    if ctx.get("speculative_eagle_topk") is None:
        found["speculative_eagle_topk"] = 1
    if isinstance(steps, int):
        found["speculative_num_draft_tokens"] = steps + 1
    return found


def _auto_spec_params(ctx: Context) -> dict[str, object]:
    if _algo(ctx) == "STANDALONE":
        steps, topk, draft = SPEC_PARAMS_DEFAULT
    else:
        steps, topk, draft = SPEC_PARAMS_BY_ARCH.get(ctx.architecture or "", SPEC_PARAMS_DEFAULT)
    return {
        "speculative_num_steps": steps,
        "speculative_eagle_topk": topk,
        "speculative_num_draft_tokens": draft,
    }


def _draft_is_steps_plus_one(ctx: Context) -> dict[str, object]:
    steps = ctx.get("speculative_num_steps")
    return {"speculative_num_draft_tokens": int(steps) + 1}  # type: ignore[call-overload]


def _topk_mismatch(ctx: Context) -> bool:
    steps, draft = ctx.get("speculative_num_steps"), ctx.get("speculative_num_draft_tokens")
    return ctx.get("speculative_eagle_topk") == 1 and isinstance(steps, int) and draft != steps + 1


def _page_not_dividing_track_interval(ctx: Context) -> bool:
    page, interval = ctx.get("page_size"), ctx.get("mamba_track_interval")
    return isinstance(page, int) and isinstance(interval, int) and page > 0 and interval % page != 0


def _paged(ctx: Context) -> bool:
    page = ctx.get("page_size")
    return isinstance(page, int) and page > 1


def _backend_not_in(backends: tuple[str, ...]) -> Predicate:
    # an unset backend resolves to flashinfer/fa3 on CUDA, both in every allowed list
    return lambda ctx: ctx.get("attention_backend") not in (None, *backends)


def _window_below_block(ctx: Context) -> bool:
    window, draft = ctx.get("speculative_draft_window_size"), ctx.get("speculative_num_draft_tokens")
    return isinstance(window, int) and isinstance(draft, int) and window < draft


def _int_below(ctx: Context, dest: str, bound: int) -> bool:
    value = ctx.get(dest)
    return isinstance(value, int) and value < bound


def _dspark_tokens_mismatch(ctx: Context) -> bool:
    gamma, draft = ctx.get("speculative_dspark_block_size"), ctx.get("speculative_num_draft_tokens")
    return isinstance(gamma, int) and isinstance(draft, int) and draft != gamma + 1


def _dspark_draft_tokens(ctx: Context) -> dict[str, object]:
    gamma = ctx.get("speculative_dspark_block_size")
    return {"speculative_num_draft_tokens": (gamma if isinstance(gamma, int) else 7) + 1}


def _not_fa3(ctx: Context) -> bool:
    backends = [
        ctx.get(d) for d in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    ]
    if any(b not in (None, "fa3") for b in backends):
        return True
    return ctx.get("attention_backend") is None and ctx.gpu.compute_capability != (9, 0)


def _ngram_steps(ctx: Context) -> dict[str, object]:
    draft, topk = ctx.get("speculative_num_draft_tokens"), ctx.get("speculative_eagle_topk")
    assert isinstance(draft, int) and isinstance(topk, int)
    return {"speculative_num_steps": draft // topk}


def _tp_size(ctx: Context) -> int:
    value = ctx.get("tp_size") or ctx.get("tensor_parallel_size")  # the dest's name before 0.5.14
    return value if isinstance(value, int) else 1


def _chunked_prefill_default(ctx: Context) -> dict[str, object]:
    return {"chunked_prefill_size": gpu_defaults(ctx.gpu.memory_gib).chunked_prefill_size}


def _graph_bs_default(dest: str) -> Callable[[Context], dict[str, object]]:
    return lambda ctx: {dest: cuda_graph_max_bs(ctx.gpu.memory_gib, _tp_size(ctx))}


def _ngram_topk(ctx: Context) -> dict[str, object]:
    return {"speculative_eagle_topk": ctx.get("speculative_ngram_max_bfs_breadth")}


INVALID_ALGO_HINT = (
    "{speculative_algorithm!r} is not an SGLang speculative algorithm: for a model's own MTP head use "
    "NEXTN (an alias of EAGLE); for a separate drafter EAGLE/EAGLE3/STANDALONE/DFLASH (DSPARK from 0.5.19); "
    "NGRAM needs no drafter"
)

RULES: tuple[Rule, ...] = (
    # --- invalid values ------------------------------------------------------------------------
    Rule(
        "sglang-spec-algorithm-unknown",
        E,
        versions(">=0.5.12"),
        "error",
        all_of(spec_on, not_(_algo_known)),
        "Unknown speculative algorithm name: {speculative_algorithm}. " + INVALID_ALGO_HINT,
        Fix(args=("--speculative-algorithm", "NEXTN")),
    ),
    # --- defaults from the GPU's memory size (`_handle_gpu_memory_settings`) -------------------
    Rule(
        "sglang-gpu-chunked-prefill-default",
        E,
        ALL,
        "adjusts",
        unset("chunked_prefill_size"),
        "chunked_prefill_size defaults to {chunked_prefill_size} on a GPU of this memory size",
        sets=_chunked_prefill_default,
    ),
    Rule(
        "sglang-gpu-cuda-graph-max-bs-default",
        E,
        ERA_A,
        "adjusts",
        unset("cuda_graph_max_bs"),
        "cuda_graph_max_bs defaults to {cuda_graph_max_bs} on a GPU of this memory size and TP",
        sets=_graph_bs_default("cuda_graph_max_bs"),
    ),
    Rule(
        "sglang-gpu-cuda-graph-max-bs-default-b",
        E,
        ERA_B,
        "adjusts",
        unset("cuda_graph_max_bs_decode"),
        "the decode CUDA graphs' batch limit defaults to {cuda_graph_max_bs_decode} on a GPU of this "
        "memory size and TP",
        sets=_graph_bs_default("cuda_graph_max_bs_decode"),
    ),
    # --- defaults resolved early (`_handle_missing_default_values`) ----------------------------
    Rule(
        "sglang-mamba-auto-no-buffer",
        E,
        ERA_A,
        "adjusts",
        eq(STRAT_A, "auto"),
        "--mamba-scheduler-strategy auto resolves to no_buffer in this release",
        sets=set_to(mamba_scheduler_strategy="no_buffer"),
    ),
    # --- hybrid models, era A (`_handle_mamba_radix_cache`) ------------------------------------
    Rule(
        "sglang-mamba-extra-buffer-unsupported",
        E,
        ERA_A,
        "error",
        all_of(hybrid, not_(arch_in(EXTRA_BUFFER_ARCHS)), one_of(STRAT_A, EXTRA)),
        "mamba extra_buffer is not supported for {arch} model",
        Fix(args=("--mamba-scheduler-strategy", "no_buffer")),
    ),
    Rule(
        "sglang-mamba-extra-buffer-needs-radix",
        E,
        ERA_A,
        "error",
        all_of(hybrid, one_of(STRAT_A, EXTRA), truthy("disable_radix_cache")),
        "mamba extra_buffer is not compatible with --disable-radix-cache. Overlap scheduling is "
        "already supported with no_buffer + disable_radix_cache. Please use "
        "--mamba-scheduler-strategy no_buffer instead.",
        Fix(args=("--mamba-scheduler-strategy", "no_buffer")),
    ),
    Rule(
        "sglang-mamba-extra-buffer-page-size",
        E,
        ERA_A,
        "error",
        all_of(hybrid, one_of(STRAT_A, EXTRA), radix_on, _page_not_dividing_track_interval),
        "mamba_track_interval {mamba_track_interval} must be divisible by page_size {page_size}",
        Fix(args=("--page-size", "64")),
    ),
    Rule(
        "sglang-mamba-extra-buffer-lazy-spec",
        E,
        ERA_A & versions(">=0.5.13"),
        "error",
        all_of(hybrid, arch_in(EXTRA_BUFFER_ARCHS), eq(STRAT_A, "extra_buffer_lazy"), radix_on, draft_given),
        "extra_buffer_lazy is not yet supported with speculative decoding. Use "
        "--mamba-scheduler-strategy extra_buffer instead.",
        Fix(args=("--mamba-scheduler-strategy", "extra_buffer")),
        why="0.5.13.post1 asserts it in `_handle_mamba_radix_cache`, before the speculative hook: "
        "so only when --speculative-num-draft-tokens is given, whatever the algorithm",
    ),
    Rule(
        "sglang-mamba-no-buffer-page-size",
        E,
        ERA_A & versions(">=0.5.11"),
        "adjusts",
        all_of(hybrid, eq(STRAT_A, "no_buffer"), radix_on, int_gt("page_size", 1)),
        "{arch} with radix cache requires page_size=1 in the current Mamba scheduling mode "
        "(no_buffer), but got {page_size}. Automatically setting page_size=1.",
        sets=set_to(page_size=1),
    ),
    Rule(
        "sglang-mamba-no-buffer-no-overlap",
        E,
        ERA_A,
        "adjusts",
        all_of(hybrid, eq(STRAT_A, "no_buffer"), radix_on, not_(spec_on)),
        "Disabling overlap schedule since mamba no_buffer is not compatible with overlap schedule",
        sets=set_to(disable_overlap_schedule=True),
    ),
    Rule(
        "sglang-mamba-no-buffer-spec-radix",
        E,
        ERA_A,
        "error",
        all_of(hybrid, eq(STRAT_A, "no_buffer"), radix_on, spec_on),
        "Speculative decoding for {arch} is not compatible with radix cache when using "
        "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
        "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.",
        _strategy_fix("--mamba-scheduler-strategy", "extra_buffer", {"SGLANG_ENABLE_SPEC_V2": "1"}),
        why="the incident's refusal",
    ),
    # --- hybrid models, era B (0.5.14 `_handle_mamba_radix_cache`, 0.5.23 resolution) ----------
    Rule(
        "sglang-mamba-auto-resolve",
        E,
        ERA_B,
        "adjusts",
        all_of(hybrid, radix_on, eq(STRAT_B, "auto")),
        "--mamba-radix-cache-strategy auto picks extra_buffer when overlap scheduling or page_size > 1 is "
        "wanted and the model supports it, otherwise no_buffer with overlap scheduling off: here "
        "{mamba_radix_cache_strategy}",
        sets=_auto_strategy_b,
    ),
    Rule(
        "sglang-mamba-auto-overlap-off",
        E,
        ERA_B,
        "adjusts",
        all_of(
            hybrid,
            radix_on,
            eq(STRAT_B, "no_buffer"),
            truthy("disable_overlap_schedule"),
            not_(given("disable_overlap_schedule")),
        ),
        "--mamba-radix-cache-strategy auto resolved to no_buffer for {arch} (linear_attn_backend "
        "{linear_attn_backend}), which silently turns the overlap scheduler off: the scheduler no "
        "longer prepares the next batch while the GPU runs this one, so decode throughput drops",
        _overlap_fix,
        why="0.5.23 arg_groups/overrides.py _mamba_radix_cache_resolution sets "
        "disable_overlap_schedule=True and logs nothing",
    ),
    Rule(
        "sglang-mamba-extra-buffer-dense",
        E,
        versions(">=0.5.23"),
        "error",
        all_of(not_(hybrid), radix_on, one_of(STRAT_B, EXTRA)),
        "--mamba-radix-cache-strategy {mamba_radix_cache_strategy} needs mamba state, got {arch}.",
        Fix(remove_args=("--mamba-radix-cache-strategy",)),
    ),
    Rule(
        "sglang-mamba-extra-buffer-unsupported-b",
        E,
        ERA_B,
        "error",
        all_of(hybrid, radix_on, one_of(STRAT_B, EXTRA), not_(arch_in(EXTRA_BUFFER_ARCHS))),
        "extra_buffer is not supported for {arch}; use no_buffer.",
        Fix(args=("--mamba-radix-cache-strategy", "no_buffer")),
    ),
    Rule(
        "sglang-mamba-extra-buffer-lazy-spec-b",
        E,
        ERA_B & versions("<0.5.19"),
        "error",
        all_of(hybrid, radix_on, eq(STRAT_B, "extra_buffer_lazy"), arch_in(EXTRA_BUFFER_ARCHS), draft_given),
        "extra_buffer_lazy unsupported with spec.",
        Fix(args=("--mamba-radix-cache-strategy", "extra_buffer")),
        why="0.5.14's `_validate_mamba_extra_buffer` runs before the speculative hook (so only an "
        "explicit --speculative-num-draft-tokens trips it); 0.5.19's mamba_hook supports lazy with spec",
    ),
    Rule(
        "sglang-mamba-extra-buffer-page-size-b",
        E,
        ERA_B,
        "error",
        all_of(hybrid, radix_on, one_of(STRAT_B, EXTRA), _page_not_dividing_track_interval),
        "mamba_track_interval {mamba_track_interval} must be divisible by page_size {page_size}",
        Fix(args=("--page-size", "64")),
    ),
    Rule(
        "sglang-mamba-no-buffer-page-size-b",
        E,
        ERA_B,
        "error",
        all_of(hybrid, radix_on, eq(STRAT_B, "no_buffer"), int_gt("page_size", 1)),
        "no_buffer only supports page_size=1.",
        Fix(args=("--mamba-radix-cache-strategy", "extra_buffer")),
    ),
    Rule(
        "sglang-mamba-no-buffer-overlap-b",
        E,
        ERA_B,
        "error",
        all_of(hybrid, radix_on, eq(STRAT_B, "no_buffer"), not_(truthy("disable_overlap_schedule"))),
        "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.",
        Fix(args=("--mamba-radix-cache-strategy", "extra_buffer")),
        why="0.5.14 turned the incident's ValueError into this assertion; extra_buffer keeps overlap",
    ),
    # --- page size default (`_handle_page_size`) ------------------------------------------------
    Rule(
        "sglang-page-size-default",
        E,
        ALL,
        "adjusts",
        unset("page_size"),
        "page_size defaults to 1 on CUDA",
        sets=set_to(page_size=1),
    ),
    # --- speculative decoding (`_handle_speculative_decoding` / speculative_hook) --------------
    Rule(
        "sglang-spec-nextn-is-eagle",
        E,
        ALL,
        "adjusts",
        algo_in(("NEXTN",)),
        "NEXTN is SGLang's alias of EAGLE (the model's own MTP head drafts)",
        sets=set_to(speculative_algorithm="EAGLE"),
    ),
    Rule(
        "sglang-spec-upper-case",
        E,
        versions(">=0.5.12"),
        "adjusts",
        all_of(spec_on, lambda ctx: str(ctx.get("speculative_algorithm")) != _algo(ctx)),
        "the speculative algorithm name is upper-cased",
        sets=lambda ctx: {"speculative_algorithm": _algo(ctx)},
    ),
    Rule(
        "sglang-dflash-needs-draft",
        E,
        versions(">=0.5.11"),
        "error",
        all_of(algo_in(("DFLASH",)), unset("speculative_draft_model_path")),
        "DFLASH speculative decoding requires setting --speculative-draft-model-path.",
        Fix(args=("--speculative-draft-model-path", "<dflash-drafter-dir>")),
    ),
    Rule(
        "sglang-dflash-single-step",
        E,
        versions(">=0.5.11"),
        "adjusts",
        algo_in(("DFLASH",)),
        "DFLASH only supports speculative_num_steps == 1 and speculative_eagle_topk == 1",
        sets=set_to(speculative_num_steps=1, speculative_eagle_topk=1),
    ),
    Rule(
        "sglang-dflash-block-size",
        E,
        versions(">=0.5.11"),
        "adjusts",
        all_of(algo_in(("DFLASH",)), unset("speculative_num_draft_tokens")),
        "speculative_num_draft_tokens is not set; defaulting to 16 for DFLASH (when the drafter config "
        "names no block size)",
        sets=set_to(speculative_num_draft_tokens=16),
    ),
    Rule(
        "sglang-dflash-window-below-block",
        E,
        versions(">=0.5.23"),
        "error",
        all_of(algo_in(("DFLASH",)), _window_below_block),
        "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
        "window_size={speculative_draft_window_size}, block_size={speculative_num_draft_tokens}.",
        lambda ctx: Fix(
            args=("--speculative-draft-window-size", str(ctx.get("speculative_num_draft_tokens")))
        ),
        why="arg_groups/speculative_hook.py _handle_dflash, after the block size is resolved",
    ),
    # --- DSPARK (`_handle_dspark`, 0.5.19 and 0.5.23 alike) and UNO (`_handle_uno`, 0.5.20+) ----
    Rule(
        "sglang-dspark-needs-draft",
        E,
        DSPARK,
        "error",
        all_of(algo_in(("DSPARK",)), unset("speculative_draft_model_path")),
        "DSpark dense speculative decoding requires setting --speculative-draft-model-path. (Not "
        "needed only when the target checkpoint bundles its DSpark draft or has a dspark/ subfolder.)",
        Fix(args=("--speculative-draft-model-path", "<dspark-drafter-dir>")),
    ),
    Rule(
        "sglang-dspark-single-step",
        E,
        DSPARK,
        "adjusts",
        algo_in(("DSPARK",)),
        "DSpark only supports speculative_num_steps == 1 and speculative_eagle_topk == 1",
        sets=set_to(speculative_num_steps=1, speculative_eagle_topk=1),
    ),
    Rule(
        "sglang-dspark-tokens-mismatch",
        E,
        DSPARK,
        "error",
        all_of(algo_in(("DSPARK",)), _dspark_tokens_mismatch),
        "DSpark speculative_num_draft_tokens must equal gamma + 1 (gamma = "
        "--speculative-dspark-block-size {speculative_dspark_block_size}), but got "
        "speculative_num_draft_tokens={speculative_num_draft_tokens}.",
        Fix(remove_args=("--speculative-num-draft-tokens",)),
    ),
    Rule(
        "sglang-dspark-draft-tokens",
        E,
        DSPARK,
        "adjusts",
        all_of(algo_in(("DSPARK",)), unset("speculative_num_draft_tokens")),
        "DSpark verifies gamma + 1 tokens: speculative_num_draft_tokens is {speculative_num_draft_tokens} "
        "(gamma from --speculative-dspark-block-size, else the drafter's config, else 7)",
        sets=_dspark_draft_tokens,
    ),
    Rule(
        "sglang-dspark-tokens-at-least-2",
        E,
        DSPARK,
        "error",
        all_of(algo_in(("DSPARK",)), lambda ctx: _int_below(ctx, "speculative_num_draft_tokens", 2)),
        "DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), got {speculative_num_draft_tokens}.",
        Fix(remove_args=("--speculative-num-draft-tokens",)),
    ),
    Rule(
        "sglang-dspark-max-running-48",
        E,
        DSPARK,
        "adjusts",
        all_of(algo_in(("DSPARK",)), unset("max_running_requests")),
        "Max running requests is reset to 48 for speculative decoding. You can override this by "
        "explicitly setting --max-running-requests.",
        sets=set_to(max_running_requests=48),
    ),
    Rule(
        "sglang-uno-no-drafter",
        E,
        UNO,
        "error",
        all_of(algo_in(("UNO",)), not_(unset("speculative_draft_model_path"))),
        "UNO reuses the target model and does not accept --speculative-draft-model-path.",
        Fix(remove_args=("--speculative-draft-model-path",)),
    ),
    Rule(
        "sglang-uno-needs-lora",
        E,
        UNO,
        "error",
        all_of(algo_in(("UNO",)), unset("uno_lora_path")),
        "UNO requires --uno-lora-path.",
        Fix(args=("--uno-lora-path", "<uno-adapter-dir>")),
    ),
    Rule(
        "sglang-uno-needs-draft-tokens",
        E,
        UNO,
        "error",
        all_of(
            algo_in(("UNO",)),
            lambda ctx: (
                not isinstance(ctx.get("speculative_num_draft_tokens"), int)
                or _int_below(ctx, "speculative_num_draft_tokens", 1)
            ),
        ),
        "UNO requires --speculative-num-draft-tokens to be a positive integer denoting the linear width "
        "or tree verify width Q.",
        Fix(args=("--speculative-num-draft-tokens", "4")),
    ),
    Rule(
        "sglang-uno-linear",
        E,
        UNO,
        "adjusts",
        all_of(algo_in(("UNO",)), lambda ctx: ctx.get("speculative_eagle_topk") in (None, 1)),
        "UNO uses speculative_num_steps=1 and speculative_eagle_topk=1 (linear mode)",
        sets=set_to(speculative_num_steps=1, speculative_eagle_topk=1),
    ),
    Rule(
        "sglang-uno-single-gpu",
        E,
        UNO,
        "error",
        all_of(algo_in(("UNO",)), lambda ctx: _tp_size(ctx) != 1 or ctx.get("pp_size") not in (None, 1)),
        "UNO requires TP=PP=1.",
        Fix(remove_args=("--tp-size", "--pp-size")),
    ),
    Rule(
        "sglang-uno-fa3",
        E,
        UNO,
        "error",
        all_of(algo_in(("UNO",)), _not_fa3),
        "UNO requires FA3 for both prefill and decode attention; got attention_backend="
        "{attention_backend!r} on a GPU whose default is not fa3.",
        Fix(args=("--attention-backend", "fa3")),
        why="an unset backend resolves to fa3 only on Hopper (SM 9.0) for these models",
    ),
    Rule(
        "sglang-spec-max-running-48",
        E,
        ALL,
        "adjusts",
        all_of(algo_in(SPEC_ALGOS), unset("max_running_requests")),
        "Max running requests is reset to 48 for speculative decoding. You can override this by "
        "explicitly setting --max-running-requests.",
        sets=set_to(max_running_requests=48),
    ),
    Rule(
        "sglang-spec-v2-topk",
        E,
        versions(">=0.5.10,<0.5.11"),
        "error",
        all_of(
            algo_in(EAGLE_FAMILY),
            env_true("SGLANG_ENABLE_SPEC_V2", default=False),
            int_gt("speculative_eagle_topk", 1),
        ),
        "Spec v2 currently only supports topk = 1 for speculative decoding.",
        Fix(args=("--speculative-eagle-topk", "1")),
    ),
    Rule(
        "sglang-spec-v2-overlap-on",
        E,
        versions(">=0.5.10,<0.5.11"),
        "adjusts",
        all_of(algo_in(EAGLE_FAMILY), env_true("SGLANG_ENABLE_SPEC_V2", default=False)),
        "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on.",
        sets=set_to(disable_overlap_schedule=False),
    ),
    Rule(
        "sglang-spec-overlap-off",
        E,
        versions(">=0.5.10,<0.5.11"),
        "adjusts",
        all_of(algo_in(EAGLE_FAMILY), not_(env_true("SGLANG_ENABLE_SPEC_V2", default=False))),
        "Overlap scheduler is disabled when spec v2 is off (set SGLANG_ENABLE_SPEC_V2=True to enable it)",
        sets=set_to(disable_overlap_schedule=True),
    ),
    Rule(
        "sglang-spec-topk-no-overlap",
        E,
        versions(">=0.5.11,<0.5.13"),
        "adjusts",
        all_of(algo_in(EAGLE_FAMILY), int_gt("speculative_eagle_topk", 1)),
        "Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec v2 currently "
        "only supports topk = 1 (overlap scheduling off)",
        sets=set_to(disable_overlap_schedule=True),
    ),
    Rule(
        "sglang-spec-v2-off-overlap",
        E,
        ERA_A & versions(">=0.5.11"),
        "adjusts",
        all_of(algo_in(EAGLE_FAMILY), not_(env_true("SGLANG_ENABLE_SPEC_V2", default=True))),
        "SGLANG_ENABLE_SPEC_V2=0 selects the non-overlap (synchronous) spec v2 path",
        sets=set_to(disable_overlap_schedule=True),
    ),
    Rule(
        "sglang-spec-no-overlap-ngram-dflash",
        E,
        ERA_A,
        "adjusts",
        algo_in(("NGRAM", "DFLASH")),
        "The overlap scheduler is disabled for {speculative_algorithm} speculative decoding",
        sets=set_to(disable_overlap_schedule=True),
    ),
    Rule(
        "sglang-spec-no-mixed-chunk",
        E,
        versions(">=0.5.10,<0.5.19"),
        "adjusts",
        all_of(algo_in(SPEC_ALGOS), truthy("enable_mixed_chunk")),
        "Mixed chunked prefill is disabled because of using speculative decoding.",
        sets=set_to(enable_mixed_chunk=False),
    ),
    Rule(
        "sglang-spec-no-mixed-chunk-b",
        E,
        versions(">=0.5.19"),
        "adjusts",
        all_of(algo_in(("STANDALONE", "NGRAM")), truthy("enable_mixed_chunk")),
        "Mixed chunked prefill is disabled: {speculative_algorithm} speculative decoding does not "
        "support it.",
        sets=set_to(enable_mixed_chunk=False),
    ),
    # --- adaptive speculation (`_maybe_disable_adaptive`, `_init_adaptive_speculative_params`,
    # arg_groups/speculative_hook.py, run before the EAGLE handler chooses its parameters) -----
    Rule(
        "sglang-adaptive-unsupported",
        E,
        ADAPTIVE,
        "adjusts",
        all_of(truthy("speculative_adaptive"), lambda ctx: _adaptive_unsupported(ctx) is not None),
        "speculative_adaptive disabled: {why}. Falling back to static speculative params.",
        sets=set_to(speculative_adaptive=False),
        names=lambda ctx: {"why": _adaptive_unsupported(ctx)},
        why="speculative/adaptive_spec_params.py adaptive_unsupported_reason",
    ),
    Rule(
        "sglang-adaptive-steps",
        E,
        ADAPTIVE,
        "error",
        all_of(
            truthy("speculative_adaptive"),
            unset("speculative_adaptive_config"),
            given("speculative_num_steps"),
            lambda ctx: ctx.get("speculative_num_steps") not in _adaptive_candidates(ctx),
        ),
        "--speculative-num-steps={speculative_num_steps} is not in the adaptive config candidate_steps "
        "{candidates}. Pass one of those values.",
        lambda ctx: Fix(args=("--speculative-num-steps", str(_nearest_candidate(ctx)))),
        names=lambda ctx: {"candidates": list(_adaptive_candidates(ctx))},
    ),
    Rule(
        "sglang-adaptive-params",
        E,
        ADAPTIVE,
        "adjusts",
        truthy("speculative_adaptive"),
        "adaptive speculation drafts up to speculative_num_steps={speculative_num_steps} (topk 1, "
        "speculative_num_draft_tokens = steps + 1); from 64 running requests on it does not draft",
        sets=_adaptive_params,
    ),
    Rule(
        "sglang-spec-params-together",
        E,
        ALL,
        "error",
        all_of(
            algo_in(EAGLE_FAMILY),
            unset("speculative_num_steps"),
            any_of(given("speculative_eagle_topk"), given("speculative_num_draft_tokens")),
        ),
        "AssertionError: --speculative-eagle-topk / --speculative-num-draft-tokens given without "
        "--speculative-num-steps (SGLang only auto-chooses all three together)",
        Fix(args=("--speculative-num-steps", "3")),
    ),
    Rule(
        "sglang-spec-auto-params",
        E,
        ALL,
        "adjusts",
        all_of(algo_in(EAGLE_FAMILY), unset("speculative_num_steps")),
        "speculative num_steps/eagle_topk/num_draft_tokens chosen automatically",
        sets=_auto_spec_params,
    ),
    Rule(
        "sglang-spec-steps-need-topk",
        E,
        ALL,
        "error",
        all_of(algo_in(EAGLE_FAMILY), given("speculative_num_steps"), unset("speculative_eagle_topk")),
        "TypeError: --speculative-num-steps given without --speculative-eagle-topk (SGLang compares the "
        "unset topk with 1 and crashes)",
        Fix(args=("--speculative-eagle-topk", "1")),
    ),
    Rule(
        "sglang-spec-trtllm-topk",
        E,
        ALL,
        "error",
        all_of(
            algo_in(EAGLE_FAMILY), eq("attention_backend", "trtllm_mha"), int_gt("speculative_eagle_topk", 1)
        ),
        "trtllm_mha backend only supports topk = 1 for speculative decoding.",
        Fix(args=("--speculative-eagle-topk", "1")),
    ),
    Rule(
        "sglang-spec-topk1-draft-tokens",
        E,
        ALL,
        "adjusts",
        all_of(algo_in(EAGLE_FAMILY), _topk_mismatch),
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1",
        sets=_draft_is_steps_plus_one,
    ),
    Rule(
        "sglang-spec-topk-paged-backend-a",
        E,
        versions(">=0.5.10,<0.5.13"),
        "error",
        all_of(
            algo_in(EAGLE_FAMILY),
            int_gt("speculative_eagle_topk", 1),
            _paged,
            _backend_not_in(("flashinfer", "fa3")),
        ),
        "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for "
        "paged attention backends. This combination is only supported for the 'flashinfer' backend.",
        Fix(args=("--attention-backend", "flashinfer")),
    ),
    Rule(
        "sglang-spec-topk-paged-backend",
        E,
        versions(">=0.5.13"),
        "error",
        all_of(
            algo_in(EAGLE_FAMILY),
            int_gt("speculative_eagle_topk", 1),
            _paged,
            _backend_not_in(("flashinfer", "fa3", "triton")),
        ),
        "speculative_eagle_topk > 1 with page_size > 1 is only supported on ('flashinfer', 'fa3', "
        "'triton'); got attention_backend={attention_backend!r}. Use page_size == 1 or one of those "
        "backends.",
        Fix(args=("--attention-backend", "flashinfer")),
    ),
    Rule(
        "sglang-ngram-topk",
        E,
        ALL,
        "adjusts",
        algo_in(("NGRAM",)),
        "NGRAM uses speculative_ngram_max_bfs_breadth as its topk",
        sets=_ngram_topk,
    ),
    Rule(
        "sglang-ngram-draft-tokens",
        E,
        ALL,
        "adjusts",
        all_of(algo_in(("NGRAM",)), unset("speculative_num_draft_tokens")),
        "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding.",
        sets=set_to(speculative_num_draft_tokens=12),
    ),
    Rule(
        "sglang-ngram-steps",
        E,
        ERA_B,
        "adjusts",
        all_of(algo_in(("NGRAM",)), unset("speculative_num_steps")),
        "NGRAM derives speculative_num_steps as num_draft_tokens // eagle_topk",
        sets=_ngram_steps,
    ),
    Rule(
        "sglang-ngram-paged-backend",
        E,
        ALL,
        "error",
        all_of(
            algo_in(("NGRAM",)),
            int_gt("speculative_eagle_topk", 1),
            _paged,
            _backend_not_in(("flashinfer",)),
        ),
        "speculative_eagle_topk({speculative_eagle_topk}) > 1 with page_size({page_size}) > 1 is unstable "
        "and produces incorrect results for paged attention backends. This combination is only supported "
        "for the 'flashinfer' backend.",
        Fix(args=("--attention-backend", "flashinfer")),
    ),
)

# Failures users reported this year whose cause is knowable before start
RULES += (
    Rule(
        "sglang-torch-compile-with-decode-graphs",
        E,
        versions(">=0.5.17"),
        "warning",
        all_of(
            truthy("enable_torch_compile"),
            not_(truthy("disable_cuda_graph")),
            not_(truthy("disable_decode_cuda_graph")),
        ),
        "--enable-torch-compile with a captured decode CUDA graph measured ~6x slower decode than the "
        "graph alone (Qwen3.8-27B NVFP4 on an RTX 5090, SGLang 0.5.17: 9.8-10.2 vs 59.4 tok/s)",
        Fix(remove_args=("--enable-torch-compile",)),
        why="https://github.com/sgl-project/sglang/issues/35777",
    ),
)

# ModelConfig._derive_context_length (sglang/srt/configs/model_config.py): a longer
# --context-length raises unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN (an EnvBool) is true
long_context_allowed = env_true("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", False)
LONG_CONTEXT_MESSAGE = (
    "User-specified context_length ({context_length}) is greater than the derived context_length "
    "({model_context_len})."
)


def _context_fix(ctx: Context) -> Fix:
    return Fix(args=("--context-length", str(ctx.model_context_len)))


RULES += (
    Rule(
        "sglang-context-length-over-model",
        E,
        ALL,
        "error",
        all_of(longer_than_model("context_length"), not_(long_context_allowed)),
        LONG_CONTEXT_MESSAGE
        + " To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        _context_fix,
    ),
    Rule(
        "sglang-context-length-over-model-allowed",
        E,
        ALL,
        "warning",
        all_of(longer_than_model("context_length"), long_context_allowed),
        LONG_CONTEXT_MESSAGE + " SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set: this may lead to "
        "incorrect model outputs or CUDA errors",
        _context_fix,
    ),
)

# not a check the engine runs: a launch it accepts whose output a drafter job cannot use as is
RULES += (missing_parser_rule(E, ALL),)

__all__ = ["ENV_REPLACEMENTS", "RULES", "context_len"]

#: env vars a release stopped reading, with what replaces them
ENV_REPLACEMENTS: dict[str, str] = {
    "SGLANG_ENABLE_SPEC_V2": "speculative decoding always runs the V2 worker; use --disable-overlap-schedule "
    "to select the non-overlap path",
}
