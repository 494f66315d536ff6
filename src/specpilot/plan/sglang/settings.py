"""The numbers SGLang's memory sizing reads, from the flags it actually runs with.

The flag values come from `check`'s evaluation of the release's rules
(`specpilot.plan.effective`): 48 running requests for speculative decoding, the
mamba strategy behind `auto`, overlap scheduling, page size and draft-token counts
are the rules' effective values, tested against the engines; nothing here
re-derives them. The chunked-prefill size and CUDA-graph batch limit SGLang picks from the GPU's
memory are rules too (`engines/sglang/gpu.py`); what stays here is the memory
arithmetic on them (the default `mem_fraction_static` of
`_handle_gpu_memory_settings`, piecewise graph sizes) and the model's dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpilot.check.effective import EffectiveArgs
from specpilot.engines.rules import env_bool
from specpilot.engines.sglang.draft import DRAFT_MODEL_ALGORITHMS, SPECULATIVE_ALGORITHMS
from specpilot.engines.sglang.releases import SglangRelease
from specpilot.errors import UserError
from specpilot.models.shape import ModelShape, dtype_bytes

MIB_PER_GIB = 1024


@dataclass(frozen=True)
class SglangSettings:
    """Effective values of everything SGLang's memory sizing reads."""

    tp_size: int
    pp_size: int
    dp_size: int
    gpu_memory_mib: float
    page_size: int
    context_len: int
    kv_dtype_bytes: float
    weights_dtype_bytes: float
    quantized: bool
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    cuda_graph_disabled: bool
    #: how many prefill token counts are captured as CUDA graphs (0: prefill runs eagerly)
    piecewise_graph_tokens: int
    #: the largest of them the flags configure (from 0.5.17 the request pool x context bounds
    #: what is captured: `quantities.captured_prefill_tokens`)
    prefill_graph_max_tokens: int
    mem_fraction_static: float
    mem_fraction_given: bool
    speculative_algorithm: str | None
    num_draft_tokens: int
    speculative_num_steps: int
    draft_layers: int
    max_running_requests: int | None
    max_running_requests_given: bool
    #: --prefill-max-requests: requests one prefill batch may take (None: no cap)
    prefill_max_requests: int | None
    radix_cache_disabled: bool
    mamba_strategy: str
    overlap_schedule: bool
    max_mamba_cache_size: int | None
    mamba_full_memory_ratio: float
    ssm_dtype_bytes: float
    conv_dtype_bytes: float
    max_total_tokens: int | None
    multimodal: bool
    #: the KV pool is sized again after CUDA graph capture (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING)
    post_capture_kv_sizing: bool = False
    #: the prefill graph backend was chosen explicitly: the release's free-memory gate skips it not
    prefill_backend_explicit: bool = False

    @property
    def has_draft_model(self) -> bool:
        return self.speculative_algorithm in DRAFT_MODEL_ALGORITHMS

    @property
    def extra_buffer(self) -> bool:
        return self.mamba_strategy in ("extra_buffer", "extra_buffer_lazy")


def piecewise_graph_token_sizes(max_tokens: int) -> list[int]:
    """`_generate_piecewise_cuda_graph_tokens`: the prefill token counts captured as graphs."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [s for s in sizes if s <= max_tokens]


def vlm_fraction_factor(shape: ModelShape) -> float:
    """`adjust_mem_fraction_for_vlm`: the default fraction shrinks with the vision tower.

    The engine compares `num_hidden_layers * hidden_size**2` of the vision config with
    ViT-L/14's (24 * 1024**2), reading each attribute with those defaults. Qwen3.5/3.6 name
    their depth `depth`, so the engine takes 24 layers for their 27-layer, 1152-wide tower
    (factor 0.92477, the 0.835063 = 0.903 x 0.92477 a real 0.5.17 printed on the H200).
    """
    baseline = 24 * 1024**2
    layers = shape.vision_num_hidden_layers or 24
    width = shape.vision_hidden_size or 1024
    complexity_ratio = layers * width**2 / baseline
    factor = min(1.05, max(0.8, 1.0 - 0.1 * (complexity_ratio - 1.0)))
    return 0.95 * factor


def default_mem_fraction_static(
    *,
    gpu_memory_mib: float,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    piecewise_graph_tokens: int,
    tp_size: int,
    pp_size: int,
    speculative_algorithm: str | None,
    rules: SglangRelease,
    shape: ModelShape,
    language_only: bool,
    post_capture: bool = False,
) -> float:
    """SGLang's `mem_fraction_static` when the flag is absent.

    reserved_mib = 512 + 1.5 * max(chunked_prefill, 2048) + 2 * cuda_graph_max_bs
                   + tp * pp / 8 * 1024 + 8 * len(piecewise graph sizes),
    at least 10 GiB on GPUs over 60 GiB, plus the draft allowance of releases before
    0.5.14; fraction = round((gpu - reserved) / gpu, 3), then scaled down for a
    vision tower (server_args._handle_gpu_memory_settings, arg_groups/memory_hook.py).

    With post-capture KV sizing the graphs and activations are measured after capture, so
    only 1.5 GiB and the parallel slack are kept, and a multimodal model 8 GiB more.
    """
    if post_capture:
        reserved_mib = 1536 + tp_size * pp_size / 8 * 1024
        fraction = round((gpu_memory_mib - reserved_mib) / gpu_memory_mib, 3)
        if shape.is_multimodal_wrapper and not language_only:
            fraction -= 8 * 1024 / gpu_memory_mib
        return fraction
    reserved_mib = 512.0 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2
    reserved_mib += tp_size * pp_size / 8 * 1024 + piecewise_graph_tokens * 8
    if gpu_memory_mib > 60 * 1024:
        reserved_mib = max(reserved_mib, 10 * 1024)
    if speculative_algorithm == "STANDALONE":
        reserved_mib += rules.standalone_default_reserve_mib
    elif speculative_algorithm not in (None, "NGRAM"):
        reserved_mib += rules.spec_default_reserve_mib
    fraction = round((gpu_memory_mib - reserved_mib) / gpu_memory_mib, 3)
    if shape.is_multimodal_wrapper and shape.vision_param_count and not language_only:
        fraction *= vlm_fraction_factor(shape)
    return fraction


def _int(args: EffectiveArgs, name: str) -> int:
    """A value every release's table or rules set (sizes, page size)."""
    value = args.get_int(name)
    assert value is not None, f"the rules left {name} unset"
    return value


def _speculative_algorithm(args: EffectiveArgs) -> str | None:
    value = args.get_str("speculative_algorithm")
    if value is None:
        return None
    # releases before 0.5.12 keep the name as typed; their checks compare it upper-cased
    algorithm = value.upper()
    if algorithm == "UNO":
        raise UserError(
            "--speculative-algorithm UNO is not planned: it drafts with a LoRA adapter over the target "
            "(--uno-lora-path) whose weights and verify buffers the planner does not size",
            field="--speculative-algorithm",
            fix="plan without --speculative-algorithm and leave the adapter's size free in the reserve, "
            "or use DFLASH/DSPARK/EAGLE3, which are planned",
        )
    if algorithm not in SPECULATIVE_ALGORITHMS:
        raise UserError(
            f"--speculative-algorithm {value} is not an SGLang algorithm",
            field="--speculative-algorithm",
            fix="use NEXTN (a model's own MTP head), EAGLE, EAGLE3, STANDALONE, DFLASH, DSPARK or NGRAM",
        )
    return algorithm


def _mamba_strategy(args: EffectiveArgs) -> str:
    """The strategy the rules settled on; one they left at `auto` (radix cache off, or a model
    without a mamba radix cache) allocates no extra buffers."""
    typed = args.get_str("mamba_radix_cache_strategy") or args.get_str("mamba_scheduler_strategy")
    strategy = (typed or "auto").lower()
    if args.get_bool("disable_radix_cache") or strategy == "auto":
        return "no_buffer"
    return strategy


def prefill_graph_disabled(args: EffectiveArgs, shape: ModelShape, rules: SglangRelease) -> bool:
    """Whether prefill runs eagerly: graphs off, prefill graphs off (`--disable-piecewise-cuda-graph`
    before 0.5.14, `--disable-prefill-cuda-graph` or `--cuda-graph-backend-prefill disabled`
    after), a multimodal model the release does not capture, pipeline parallelism, DP attention
    or the hierarchical cache each turn the prefill graph off."""
    return (
        args.get_bool("disable_cuda_graph")
        or args.get_bool("disable_piecewise_cuda_graph")
        or args.get_bool("disable_prefill_cuda_graph")
        or (args.get_str("cuda_graph_backend_prefill") or "").lower() == "disabled"
        or (shape.is_multimodal_wrapper and shape.architecture not in rules.prefill_graph_multimodal_archs)
        or _int(args, "pp_size") > 1
        or args.get_bool("enable_dp_attention")
        or args.get_bool("enable_hierarchical_cache")
    )


#: the MLA backend's prefill capture ceiling (server_args: "we set max_bs to 2048 by default")
MLA_PREFILL_GRAPH_MAX_TOKENS = 2048


def prefill_graph_configured_max_tokens(args: EffectiveArgs, shape: ModelShape, rules: SglangRelease) -> int:
    """The largest prefill token count the server arguments ask to capture: the explicit flag
    (`--piecewise-cuda-graph-max-tokens` <= 0.5.13, `--cuda-graph-max-bs-prefill` after), else
    the chunk (2048 on the MLA backend), capped by `--max-total-tokens`; releases up to 0.5.16
    also clamp it to an explicit `--context-length` (`SglangRelease.prefill_capture_cap`)."""
    explicit = args.get_int("piecewise_cuda_graph_max_tokens") or args.get_int("cuda_graph_max_bs_prefill")
    if explicit is None:
        explicit = MLA_PREFILL_GRAPH_MAX_TOKENS if shape.kv_lora_rank else _int(args, "chunked_prefill_size")
        if (max_total := args.get_int("max_total_tokens")) is not None:
            explicit = min(explicit, max_total)
    context = args.get_int("context_length")
    if rules.prefill_capture_cap == "context_clamp" and context is not None:
        explicit = min(explicit, context)
    return explicit


def prefill_graph_token_sizes(args: EffectiveArgs, shape: ModelShape, rules: SglangRelease) -> list[int]:
    """The prefill token counts the server arguments configure for capture; none when prefill
    runs eagerly. From 0.5.17 the capture keeps only those up to max_capture_requests x
    context_length (`quantities.captured_prefill_tokens`)."""
    if prefill_graph_disabled(args, shape, rules):
        return []
    return piecewise_graph_token_sizes(prefill_graph_configured_max_tokens(args, shape, rules))


def prefill_backend_explicit(args: EffectiveArgs) -> bool:
    """An explicitly chosen prefill graph backend is exempt from the free-memory gate
    (`_cuda_graph_config_locked`)."""
    return args.given("cuda_graph_backend_prefill")


def kv_dtype_bytes(args: EffectiveArgs, shape: ModelShape) -> float:
    """Bytes per KV element. KV "auto" follows the model's compute dtype (--dtype, else the
    config's torch_dtype, float32 meaning bfloat16), not the checkpoint's quantization: an
    fp8 checkpoint still gets a bf16 KV cache."""
    kv_dtype = args.get_str("kv_cache_dtype") or "auto"
    compute_dtype = args.get_str("dtype") or "auto"
    if compute_dtype == "auto":
        compute_dtype = shape.torch_dtype if shape.torch_dtype != "float32" else "bfloat16"
    return dtype_bytes(compute_dtype if kv_dtype == "auto" else kv_dtype)


def mem_fraction_static(
    args: EffectiveArgs,
    shape: ModelShape,
    rules: SglangRelease,
    *,
    gpu_memory_mib: float,
    piecewise_graph_tokens: int,
    speculative_algorithm: str | None,
    post_capture: bool,
) -> float:
    """--mem-fraction-static, else the release's default for this GPU and configuration."""
    given = args.get_float("mem_fraction_static")
    if given is not None:
        return given
    return default_mem_fraction_static(
        gpu_memory_mib=gpu_memory_mib,
        chunked_prefill_size=_int(args, "chunked_prefill_size"),
        cuda_graph_max_bs=_int(args, "cuda_graph_max_bs"),
        piecewise_graph_tokens=piecewise_graph_tokens,
        tp_size=_int(args, "tp_size"),
        pp_size=_int(args, "pp_size"),
        speculative_algorithm=speculative_algorithm,
        rules=rules,
        shape=shape,
        language_only=args.get_bool("language_only"),
        post_capture=post_capture,
    )


POST_CAPTURE_ENV = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"


def post_capture_kv_sizing(args: EffectiveArgs, shape: ModelShape, rules: SglangRelease) -> bool:
    """`post_capture_kv_sizing_planned` (arg_groups/overrides.py, 0.5.23) for what a plan
    knows: the variable on, a CUDA device, no MLA, no decode context parallelism, memory
    saver, KV sharding or unified memory pool."""
    return (
        rules.post_capture_kv_sizing
        and env_bool(args.env, POST_CAPTURE_ENV, False)
        and not shape.kv_lora_rank
        and (args.get_int("dcp_size") or 1) == 1
        and not any(
            args.get_bool(dest)
            for dest in ("enable_memory_saver", "enable_kv_cache_sharding", "enable_unified_memory")
        )
    )


def resolve_settings(
    args: EffectiveArgs,
    shape: ModelShape,
    *,
    gpu_memory_gib: float,
    weights_dtype: str,
    quantization: str | None,
    rules: SglangRelease,
) -> SglangSettings:
    """The numbers SGLang's memory sizing reads, from the flags as `check` evaluates them."""
    gpu_memory_mib = gpu_memory_gib * MIB_PER_GIB
    prefill_graph_sizes = prefill_graph_token_sizes(args, shape, rules)
    algorithm = _speculative_algorithm(args)
    post_capture = post_capture_kv_sizing(args, shape, rules)
    draft_tokens, draft_steps, draft_layers = _draft_numbers(args, shape, algorithm)
    return SglangSettings(
        tp_size=_int(args, "tp_size"),
        pp_size=_int(args, "pp_size"),
        dp_size=_int(args, "dp_size"),
        gpu_memory_mib=gpu_memory_mib,
        page_size=_int(args, "page_size"),
        context_len=args.get_int("context_length") or shape.max_position_embeddings,
        kv_dtype_bytes=kv_dtype_bytes(args, shape),
        weights_dtype_bytes=dtype_bytes(weights_dtype),
        quantized=quantization is not None or dtype_bytes(weights_dtype) < 2,
        chunked_prefill_size=_int(args, "chunked_prefill_size"),
        cuda_graph_max_bs=_int(args, "cuda_graph_max_bs"),
        cuda_graph_disabled=args.get_bool("disable_cuda_graph"),
        piecewise_graph_tokens=len(prefill_graph_sizes),
        prefill_graph_max_tokens=max(prefill_graph_sizes, default=0),
        mem_fraction_static=mem_fraction_static(
            args,
            shape,
            rules,
            gpu_memory_mib=gpu_memory_mib,
            piecewise_graph_tokens=len(prefill_graph_sizes),
            speculative_algorithm=algorithm,
            post_capture=post_capture,
        ),
        mem_fraction_given=args.get_float("mem_fraction_static") is not None,
        speculative_algorithm=algorithm,
        num_draft_tokens=draft_tokens,
        speculative_num_steps=draft_steps,
        draft_layers=draft_layers,
        max_running_requests=args.get_int("max_running_requests"),
        max_running_requests_given=args.given("max_running_requests"),
        prefill_max_requests=args.get_int("prefill_max_requests"),
        radix_cache_disabled=args.get_bool("disable_radix_cache"),
        mamba_strategy=_mamba_strategy(args),
        overlap_schedule=not args.get_bool("disable_overlap_schedule"),
        max_mamba_cache_size=args.get_int("max_mamba_cache_size"),
        # 0.5.23's table leaves the ratio unset for its memory hook to fill with the same 0.9
        mamba_full_memory_ratio=args.get_float("mamba_full_memory_ratio") or 0.9,
        ssm_dtype_bytes=_ssm_dtype_bytes(args, shape),
        conv_dtype_bytes=dtype_bytes(args.env.get("SGLANG_MAMBA_CONV_DTYPE") or "bfloat16"),
        max_total_tokens=args.get_int("max_total_tokens"),
        multimodal=shape.is_multimodal_wrapper and not args.get_bool("language_only"),
        post_capture_kv_sizing=post_capture,
        prefill_backend_explicit=prefill_backend_explicit(args),
    )


def _draft_numbers(args: EffectiveArgs, shape: ModelShape, algorithm: str | None) -> tuple[int, int, int]:
    """(draft tokens, draft steps, draft layers); no drafting without an algorithm."""
    if not algorithm:
        return 0, 0, 1
    # NEXTN is EAGLE by now: the model's own MTP layers draft
    draft_layers = max(shape.mtp_num_layers, 1) if algorithm == "EAGLE" else 1
    return (
        args.get_int("speculative_num_draft_tokens") or 0,
        args.get_int("speculative_num_steps") or 0,
        draft_layers,
    )


def _ssm_dtype_bytes(args: EffectiveArgs, shape: ModelShape) -> float:
    """The mamba SSM state's dtype: the environment's, the flag's, else the model's."""
    ssm_dtype = args.env.get("SGLANG_MAMBA_SSM_DTYPE") or args.get_str("mamba_ssm_dtype")
    return dtype_bytes(ssm_dtype or shape.mamba_ssm_dtype)
