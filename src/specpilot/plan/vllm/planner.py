"""The vLLM planner: spec + model shape + flags -> what vLLM 0.2x/0.3x will allocate.

`resolve_inputs` turns the flags as `check` evaluates them (vLLM's own defaults and
adjustments included, `specpilot.plan.effective`) into plain numbers,
`allocation.allocate` runs vLLM's arithmetic, and `plan_vllm` writes the memory
table, the verdict and the flags that make the configuration start.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from specpilot.check.effective import EffectiveArgs
from specpilot.dtypes import DTYPE_BYTES
from specpilot.engines.fix import Fix
from specpilot.engines.human_int import human_int
from specpilot.engines.logfacts import LogFacts
from specpilot.engines.vllm.defaults import targets_cpu
from specpilot.engines.vllm.releases import CpuBackend, VllmLine, vllm_line
from specpilot.errors import UserError
from specpilot.models.layers import layer_specs
from specpilot.models.shape import ModelShape, partial_rotary_factor
from specpilot.plan.log_checks import refuse_footprint
from specpilot.plan.types import GIB, Plan, Problem, Term, VllmDetails, gib
from specpilot.plan.vllm import quantities as mem
from specpilot.plan.vllm.allocation import VllmAllocation, VllmInputs, allocate
from specpilot.plan.vllm.cpu import cpu_kv_cache_bytes
from specpilot.plan.vllm.log import parse_vllm_log
from specpilot.spec import Spec

__all__ = ["parse_vllm_log", "plan_vllm", "resolve_inputs"]

# --speculative-config methods whose draft is the checkpoint's own MTP head.
MTP_METHODS = frozenset({"mtp", "qwen3_5_mtp", "qwen3_next_mtp", "deepseek_mtp"})
# Architectures whose SSM cache dtype follows the config's `mamba_ssm_dtype`
# (models/config.py:Qwen3_5ForConditionalGenerationConfig); others use the model dtype.
SSM_DTYPE_FROM_CONFIG = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
# Bytes per weight for quantized checkpoints (scales included, roughly).
QUANT_WEIGHT_BYTES: Mapping[str, float] = {
    "fp8": 1.0,
    "modelopt": 0.56,
    "nvfp4": 0.56,
    "awq": 0.56,
    "gptq": 0.56,
    "auto_round": 0.56,
    "compressed-tensors": 1.0,
    "bitsandbytes": 0.56,
}


def _speculative(args: EffectiveArgs) -> tuple[str | None, int]:
    """(method, num_speculative_tokens) from --speculative-config (JSON text or dict)."""
    raw = args.get("speculative_config")
    if raw is None:
        return None, 0
    config = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(config, dict):
        raise UserError(
            "must be a JSON object",
            field="--speculative-config",
            fix='e.g. {"method": "mtp", "num_speculative_tokens": 3}',
        )
    return str(config.get("method", "")) or None, int(config.get("num_speculative_tokens", 0))


def _unless_auto(args: EffectiveArgs, name: str) -> str | None:
    """A dtype flag's value; "auto" (the default) leaves the choice to the model."""
    value = args.get_str(name)
    return None if value == "auto" else value


def _kv_dtype_bytes(args: EffectiveArgs, model_dtype: str) -> int:
    kv = args.get_str("kv_cache_dtype") or "auto"
    return int(DTYPE_BYTES[model_dtype if kv in ("auto", "bfloat16", "float16") else "fp8"])


def _model_dtype(spec: Spec, args: EffectiveArgs, shape: ModelShape) -> str:
    """vLLM's --dtype, "auto" meaning the checkpoint's dtype."""
    chosen = args.get_str("dtype") or "auto"
    if chosen == "auto":
        return shape.torch_dtype if shape.torch_dtype in DTYPE_BYTES else spec.model.dtype
    return {"half": "float16", "bf16": "bfloat16"}.get(chosen, chosen)


def weights_bytes_estimate(
    shape: ModelShape, spec: Spec, args: EffectiveArgs, tp_size: int, with_mtp: bool
) -> int:
    """Weights per GPU: loaded params x bytes / TP.

    ModelShape.param_count covers the whole checkpoint. vLLM skips the MTP head unless it
    is the draft (the drafter loads inside load_model, so "Model loading took" includes
    it; it shares the target's embedding and LM head), and skips the vision tower under
    --language-model-only.
    """
    quantization = spec.model.quantization or args.get_str("quantization")
    bytes_per_param = (
        QUANT_WEIGHT_BYTES.get(quantization, 1.0) if quantization else float(DTYPE_BYTES[spec.model.dtype])
    )
    params = shape.param_count - (0 if with_mtp else shape.mtp_param_count)
    if args.get_bool("language_model_only"):
        params -= shape.vision_param_count
    return int(params * bytes_per_param / tp_size)


# layers/rotary_embedding/mrope.py:MRotaryEmbedding: "we enlarge max_position_embeddings to 4
# times to get a larger cos and sin cache" (video positions of Qwen-VL models).
MROPE_CACHE_POSITIONS_FACTOR = 4


def rotary_cache_bytes(model_dir: Path | None, head_dim: int, act_dtype_bytes: int) -> int:
    """`rotary_cache_bytes_of` for the config.json in `model_dir` (0 when there is none)."""
    if model_dir is None:
        return 0
    config_path = model_dir if model_dir.suffix == ".json" else model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    return rotary_cache_bytes_of(config, head_dim, act_dtype_bytes)


def rotary_cache_bytes_of(config: Mapping[str, Any], head_dim: int, act_dtype_bytes: int) -> int:
    """The rotary cos/sin cache every GPU holds, counted in "Model loading took".

    layers/rotary_embedding/base.py: a (positions, rotary_dim) buffer cast to the model
    dtype, rotary_dim = head_dim x partial_rotary_factor, positions = max_position_embeddings
    (x4 for multimodal rotary, mrope.py); one instance shared by all layers and the MTP
    layer (get_rope caches it). The H200 matrix: the Qwen3.6-27B shape's 262,144 x 4 x 64 x
    bf16 = 0.125 GiB was the whole gap between the parameter count (50.10 GiB) and the
    printed 50.22 GiB; Qwen3-8B's 40,960 x 128 x bf16 = 0.01 GiB makes 15.27. Read from
    config.json (text_config for wrappers) because ModelShape does not carry the rope fields.
    """
    text = config.get("text_config") or config
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    factor = partial_rotary_factor(config)
    positions = int(text.get("max_position_embeddings", 0))
    if "mrope_section" in rope:
        positions *= MROPE_CACHE_POSITIONS_FACTOR
    return positions * int(head_dim * factor) * act_dtype_bytes


def _attention_bytes_per_token(shape: ModelShape, tp: int, kv_dtype_bytes: int) -> int:
    """One KV layer's bytes per token: the MLA latent on MLA models, else full attention's.
    Sliding-window layers cost what full attention does per token (`ModelShape.kv_cache_layers`)."""
    layers = layer_specs(shape)
    return (layers.mla or layers.full_attention).kv_bytes_per_token(tp, kv_dtype_bytes)


def _widest_projection(shape: ModelShape, tp_size: int) -> int:
    """Widest per-GPU activation row of one layer: MLP gate_up, MoE experts, or GDN in_proj."""
    mlp = 2 * shape.intermediate_size
    experts = layer_specs(shape).moe
    moe = experts.gate_up_width(experts.experts_per_token)
    gdn = 2 * shape.linear_key_dim + 2 * shape.linear_value_dim
    return max(mlp, moe, gdn) // tp_size


# config/vllm.py:_get_v2_model_runner_unsupported_features: speculative methods the V2 runner
# does not run (ngram); other methods (eagle, eagle3, mtp, dflash) keep it.
V2_RUNNER_UNSUPPORTED_METHODS = frozenset({"ngram", "ngram_gpu"})


def model_runner(shape: ModelShape, method: str | None) -> mem.ModelRunner:
    """Which GPU model runner vLLM 0.26 picks: its profile run (hence the peak activation) differs.

    config/vllm.py:use_v2_model_runner (_is_default_v2_model_runner_model): the V2 runner
    is the default for generate models that are neither hybrid nor MoE (the H200 matrix:
    Qwen3-8B logged v1/worker/gpu/model_runner.py, the Qwen3.6-27B hybrid
    v1/worker/gpu_model_runner.py); ngram speculation falls back to V1.
    """
    if shape.is_hybrid or shape.is_moe or method in V2_RUNNER_UNSUPPORTED_METHODS:
        return "v1"
    return "v2"


def ssm_cache_dtype(shape: ModelShape, args: EffectiveArgs, model_dtype: str) -> str:
    """The GDN recurrent state's dtype: --mamba-ssm-cache-dtype, else the config's
    `mamba_ssm_dtype` for Qwen3.5 (SSM_DTYPE_FROM_CONFIG), else the model dtype."""
    return _unless_auto(args, "mamba_ssm_cache_dtype") or (
        shape.mamba_ssm_dtype if shape.architecture in SSM_DTYPE_FROM_CONFIG else model_dtype
    )


def mamba_state_bytes_per_layer(
    shape: ModelShape, args: EffectiveArgs, tp_size: int, num_speculative_tokens: int, model_dtype: str
) -> int:
    """Conv + SSM state of one Gated-DeltaNet layer for one request (0 without GDN layers).

    The conv state widens with the speculative tokens; its dtype is --mamba-cache-dtype,
    else the model dtype.
    """
    gdn = layer_specs(shape).gated_delta_net
    if gdn is None:
        return 0
    conv_dtype_bytes = int(DTYPE_BYTES[_unless_auto(args, "mamba_cache_dtype") or model_dtype])
    ssm_dtype_bytes = int(DTYPE_BYTES[ssm_cache_dtype(shape, args, model_dtype)])
    # mamba_utils.py:gated_delta_net_state_shape: the conv window keeps num_spec more columns
    conv = gdn.conv_state_bytes(tp_size, conv_dtype_bytes, extra_positions=num_speculative_tokens)
    return conv + gdn.ssm_state_bytes(tp_size, ssm_dtype_bytes)


def weights_bytes(
    spec: Spec,
    shape: ModelShape,
    args: EffectiveArgs,
    facts: LogFacts,
    tp_size: int,
    with_mtp: bool,
    act_dtype_bytes: int,
) -> int:
    """ "Model loading took" per GPU: the spec's override, else a log's, else parameters
    (`weights_bytes_estimate`) plus the rotary cache vLLM allocates with them."""
    if spec.model.weights_gib is not None:
        return int(spec.model.weights_gib * GIB)
    return int(
        (facts.weights_gib or 0) * GIB
        or weights_bytes_estimate(shape, spec, args, tp_size, with_mtp)
        + rotary_cache_bytes_of(shape.config, shape.head_dim, act_dtype_bytes)
    )


def kv_cache_memory_flag_bytes(args: EffectiveArgs) -> int | None:
    """--kv-cache-memory-bytes: a KV budget given outright (None when absent)."""
    text = args.get_str("kv_cache_memory_bytes")
    return parse_human_int(text, "--kv-cache-memory-bytes") if text is not None else None


def available_kv_bytes_given(
    spec: Spec,
    facts: LogFacts,
    kv_memory_flag_bytes: int | None,
    gpu_total_bytes: int,
    gpu_memory_utilization: float,
    weights: int,
    cpu: CpuBackend,
) -> int | None:
    """A KV budget that replaces the profiler's: the CPU backend's configured space (the
    env var wins), else --kv-cache-memory-bytes, else a log's "Available KV cache
    memory"; None lets `allocate` derive it. Passed through GiB as the log's number is."""
    available_gib = facts.available_kv_gib
    if kv_memory_flag_bytes is not None:
        available_gib = kv_memory_flag_bytes / GIB
    if targets_cpu(spec.engine.env):  # no profiling on a CPU
        available_gib = (
            cpu_kv_cache_bytes(
                spec.engine.env, kv_memory_flag_bytes, gpu_total_bytes, gpu_memory_utilization, weights, cpu
            )
            / GIB
        )
    return int(available_gib * GIB) if available_gib is not None else None


def activation_peak_bytes(
    shape: ModelShape,
    facts: LogFacts,
    batched_tokens: int,
    max_num_seqs: int,
    tp_size: int,
    act_dtype_bytes: int,
    method: str | None,
    line: VllmLine,
) -> int:
    """Torch peak of the profile run: a log's, else the estimate for a full batch of
    --max-num-batched-tokens through the widest projection, the sampler of the runner
    vLLM picks, and (GDN) the chunked state."""
    measured_gib = facts.activation_peak_gib
    if measured_gib is not None:
        return int(measured_gib * GIB)
    gdn = layer_specs(shape).gated_delta_net
    gdn_chunk = (
        mem.gdn_chunk_state_bytes(batched_tokens, gdn.ssm_state_bytes(tp_size, act_dtype_bytes)) if gdn else 0
    )
    return mem.activation_peak_bytes_estimate(
        batched_tokens,
        shape.hidden_size,
        _widest_projection(shape, tp_size),
        min(max_num_seqs, batched_tokens),
        shape.vocab_size,
        act_dtype_bytes,
        mem.sampler_cost(line, model_runner(shape, method), speculative=method is not None),
        gdn_chunk,
    )


def non_torch_bytes(facts: LogFacts, tp_size: int, line: VllmLine) -> int:
    """Memory outside torch's allocator (NCCL, cuBLAS workspaces): a log's, else the estimate."""
    measured_gib = facts.non_torch_gib
    return (
        int(measured_gib * GIB) if measured_gib is not None else mem.non_torch_bytes_estimate(tp_size, line)
    )


def cudagraph_bytes(
    facts: LogFacts,
    enforce_eager: bool,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    line: VllmLine,
) -> int:
    """CUDA graph pool: a log's estimate (or its actual), else ours for the widest graph the
    release captures (0 under --enforce-eager)."""
    measured_gib = facts.cudagraph_gib if facts.cudagraph_gib is not None else facts.cudagraph_actual_gib
    if measured_gib is not None:
        return int(measured_gib * GIB)
    if line.capture_by_phase:
        # prefill graphs up to the platform's default size, whatever --max-num-seqs says
        widest = min(mem.MAX_CUDAGRAPH_CAPTURE_SIZE, max_num_batched_tokens)
    else:
        widest = mem.max_cudagraph_capture_size(max_num_seqs)
    return mem.cudagraph_bytes_estimate(enforce_eager, widest, line)


def default_block_size_tokens(shape: ModelShape, on_cpu: bool, cpu: CpuBackend) -> int:
    """The block size without --block-size: the CUDA kernels' smallest, or the CPU
    backend's (its own for MLA)."""
    if not on_cpu:
        return mem.DEFAULT_BLOCK_SIZE_TOKENS
    return cpu.mla_block_size_tokens if shape.kv_lora_rank else cpu.block_size_tokens


def attention_layers(shape: ModelShape, with_mtp: bool) -> int:
    """Layers with a KV cache, the MTP draft's included when it is the drafter."""
    return shape.kv_cache_layers + (shape.mtp_num_layers if with_mtp else 0)


def resolve_inputs(
    spec: Spec, shape: ModelShape, args: EffectiveArgs, facts: LogFacts | None = None
) -> VllmInputs:
    """Every number vLLM's startup arithmetic needs, from flags, defaults and a log's facts."""
    facts = facts or LogFacts()
    line = vllm_line(spec.engine.version)
    tp = args.get_int("tensor_parallel_size") or 1
    total_gib = facts.gpu_total_gib if facts.gpu_total_gib is not None else spec.gpu.memory_gib
    total_bytes = int(total_gib * GIB)
    util = args.get_float("gpu_memory_utilization")
    assert util is not None, "every vLLM flag table and line rule sets gpu_memory_utilization"
    max_len, _ = _max_model_len(args, shape)
    on_cpu = targets_cpu(spec.engine.env)
    batched = parse_human_int(str(args.get("max_num_batched_tokens")), "--max-num-batched-tokens")
    seqs = args.get_int("max_num_seqs")
    assert seqs is not None, "vLLM's batch-default rule sets it"
    method, num_spec = _speculative(args)
    with_mtp = method in MTP_METHODS
    model_dtype = _model_dtype(spec, args, shape)
    act_bytes = int(DTYPE_BYTES[model_dtype])
    eager = args.get_bool("enforce_eager")
    weights = weights_bytes(spec, shape, args, facts, tp, with_mtp, act_bytes)
    inputs = VllmInputs(
        gpu_total_bytes=total_bytes,
        gpu_memory_utilization=util,
        tp_size=tp,
        max_model_len=max_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        weights_bytes=weights,
        activation_peak_bytes=activation_peak_bytes(shape, facts, batched, seqs, tp, act_bytes, method, line),
        non_torch_bytes=non_torch_bytes(facts, tp, line),
        cudagraph_bytes=cudagraph_bytes(facts, eager, seqs, batched, line),
        attention_layers=attention_layers(shape, with_mtp),
        mamba_layers=shape.linear_attention_layers,
        attention_bytes_per_token_per_layer=_attention_bytes_per_token(
            shape, tp, _kv_dtype_bytes(args, model_dtype)
        ),
        mamba_state_bytes_per_layer=mamba_state_bytes_per_layer(shape, args, tp, num_spec, model_dtype),
        num_speculative_tokens=num_spec,
        prefix_caching=args.get_bool("enable_prefix_caching"),
        block_size_tokens=args.get_int("block_size") or default_block_size_tokens(shape, on_cpu, line.cpu),
        full_cudagraphs=shape.is_hybrid and not eager and not on_cpu,
        available_kv_bytes_measured=available_kv_bytes_given(
            spec, facts, kv_cache_memory_flag_bytes(args), total_bytes, util, weights, line.cpu
        ),
    )
    if on_cpu:  # nothing is profiled out of a CPU pool
        return replace(inputs, activation_peak_bytes=0, non_torch_bytes=0, cudagraph_bytes=0)
    return inputs


def parse_human_int(text: str, field: str) -> int:
    """vLLM's human_readable_int: 32768, 25.6k (x1000), 32K (x1024), 8G (x2**30)."""
    try:
        return human_int(text)
    except ValueError:
        raise UserError(f"not a number: {text!r}", field=field, fix="e.g. 32768 or 32K") from None


def _max_model_len(args: EffectiveArgs, shape: ModelShape) -> tuple[int, bool]:
    """(max_model_len, auto): "auto"/-1 lets vLLM fit the length to the KV memory."""
    text = args.get_str("max_model_len")
    if text is None:
        return shape.max_position_embeddings, False
    if text.strip() in ("auto", "-1"):
        return shape.max_position_embeddings, True
    return parse_human_int(text, "--max-model-len"), False


# Above this the engine's own and the driver's unaccounted memory tends to OOM at runtime.
MAX_UTILIZATION = 0.95


def utilization_needed(inputs: VllmInputs, alloc: VllmAllocation) -> float:
    """Smallest --gpu-memory-utilization (2 decimals) whose budget holds non-KV + one request."""
    non_kv = alloc.requested_bytes - alloc.available_kv_bytes
    needed = non_kv + alloc.one_request_bytes
    return math.ceil(100 * needed / inputs.gpu_total_bytes + 1e-9) / 100


def _doubled_by(args: EffectiveArgs) -> str:
    """Why an unset --max-num-seqs is this large, when throughput mode doubled it (check's rule)."""
    if args.get("performance_mode") == "throughput" and not args.given("max_num_seqs"):
        return " (doubled by --performance-mode throughput)"
    return ""


def _problems(inputs: VllmInputs, alloc: VllmAllocation, spec: Spec, args: EffectiveArgs) -> list[Problem]:
    """What stops vLLM from starting, each with the flags that fix it."""
    problems: list[Problem] = []
    free = spec.gpu.free_before_load_gib
    if free is not None and free * GIB < alloc.requested_bytes:
        util = round(free * GIB / inputs.gpu_total_bytes - 0.01, 2)
        problems.append(
            Problem(
                "free_memory_below_request",
                f"free memory {free:.2f} GiB < requested {gib(alloc.requested_bytes):.2f} GiB",
                Fix(("--gpu-memory-utilization", f"{util}")),
            )
        )
    util = utilization_needed(inputs, alloc)
    raise_util = Fix(("--gpu-memory-utilization", f"{util}")) if util <= MAX_UTILIZATION else None
    if alloc.available_kv_bytes <= 0:
        problems.append(
            Problem(
                "no_kv_memory",
                f"weights, activations and graphs leave {gib(alloc.available_kv_bytes):.2f} GiB for KV",
                raise_util or Fix(("--tensor-parallel-size", str(2 * inputs.tp_size))),
            )
        )
    elif not alloc.fits_one_request:
        problems.append(
            Problem(
                "max_model_len_does_not_fit",
                f"one {inputs.max_model_len}-token request needs {gib(alloc.one_request_bytes):.2f} GiB"
                f" of KV, {gib(alloc.available_kv_bytes):.2f} GiB available",
                Fix(("--max-model-len", str(alloc.largest_max_model_len))),
            )
        )
    if inputs.full_cudagraphs and inputs.mamba_layers and inputs.max_num_seqs > alloc.num_blocks > 0:
        problems.append(
            Problem(
                "max_num_seqs_above_mamba_blocks",
                f"--max-num-seqs {inputs.max_num_seqs}{_doubled_by(args)} exceeds the {alloc.num_blocks} "
                "cache blocks; vLLM refuses to capture FULL CUDA graphs (config/compilation.py)",
                Fix(("--max-num-seqs", str(alloc.num_blocks))),
            )
        )
    return problems


def _measured_keys(spec: Spec, facts: LogFacts | None) -> dict[str, float]:
    """The inputs that came from a log or the spec's overrides rather than an estimate."""
    keys = facts.measured_inputs() if facts is not None else {}
    if spec.model.weights_gib is not None:
        keys["weights_gib"] = spec.model.weights_gib
    return keys


def _kv_budget_source(spec: Spec, facts: LogFacts | None) -> str:
    """Where an unmeasured KV budget comes from: the CPU backend's configuration, else the
    other terms (measured when a log was given, estimated otherwise)."""
    if targets_cpu(spec.engine.env):
        return "config"
    return "measured" if facts is not None and facts.measured_inputs() else "estimated"


def memory_terms(
    inputs: VllmInputs, alloc: VllmAllocation, measured_keys: Mapping[str, float], kv_source: str
) -> list[Term]:
    """The memory table in the order of vLLM's own "Available KV cache memory" sum."""

    def source_of(key: str, otherwise: str = "estimated") -> str:
        return "measured" if key in measured_keys else otherwise

    return [
        Term("requested (total x gpu_memory_utilization)", gib(alloc.requested_bytes), "config"),
        Term("weights", gib(inputs.weights_bytes), source_of("weights_gib")),
        Term("peak activation", gib(inputs.activation_peak_bytes), source_of("activation_peak_gib")),
        Term("non-torch memory", gib(inputs.non_torch_bytes), source_of("non_torch_gib")),
        Term("CUDA graph memory", gib(inputs.cudagraph_bytes), source_of("cudagraph_gib")),
        Term(
            "available KV cache memory",
            gib(alloc.available_kv_bytes),
            source_of("available_kv_gib", otherwise=kv_source),
        ),
    ]


def recommended_args(inputs: VllmInputs, alloc: VllmAllocation) -> list[str]:
    """The three knobs of `recommended_knobs`; when no budget holds the weights, twice the
    GPUs with the limits unchanged."""
    util, max_len, seqs = recommended_knobs(inputs, alloc)
    if max_len == 0:
        return [
            "--tensor-parallel-size",
            str(2 * inputs.tp_size),
            "--gpu-memory-utilization",
            f"{inputs.gpu_memory_utilization}",
            "--max-model-len",
            str(inputs.max_model_len),
            "--max-num-seqs",
            str(inputs.max_num_seqs),
        ]
    return [
        "--gpu-memory-utilization",
        f"{util}",
        "--max-model-len",
        str(max_len),
        "--max-num-seqs",
        str(seqs),
    ]


def _reserve_needed_gib(spec: Spec) -> float:
    """What other processes hold on the card before vLLM starts (0 when not given)."""
    free_gib = spec.gpu.free_before_load_gib
    return spec.gpu.memory_gib - free_gib if free_gib is not None else 0.0


def _details(inputs: VllmInputs, alloc: VllmAllocation) -> VllmDetails:
    """The pool's geometry as vLLM logs it."""
    return VllmDetails(
        attention_block_size_tokens=alloc.block_size_tokens,
        page_bytes=alloc.page_bytes,
        kv_cache_groups=alloc.groups.attention_groups + alloc.groups.mamba_groups,
        num_blocks=alloc.num_blocks,
        blocks_per_request=alloc.blocks_per_request,
        max_concurrency=round(alloc.max_concurrency, 2),
        max_model_len_tokens=inputs.max_model_len,
    )


def plan_vllm(spec: Spec, shape: ModelShape, args: EffectiveArgs, facts: LogFacts | None = None) -> Plan:
    """The plan for a vLLM server; `facts`: what a previous start's log printed."""
    inputs = resolve_inputs(spec, shape, args, facts)
    alloc = allocate(inputs)
    if _max_model_len(args, shape)[1] and 0 < alloc.largest_max_model_len < inputs.max_model_len:
        # engine/kv_cache_utils.py:_auto_fit_max_model_len
        inputs = replace(inputs, max_model_len=alloc.largest_max_model_len)
        alloc = allocate(inputs)
    problems = _problems(inputs, alloc, spec, args)
    measured_keys = _measured_keys(spec, facts)
    on_cpu = targets_cpu(spec.engine.env)
    cpu = vllm_line(spec.engine.version).cpu
    return Plan(
        engine=spec.engine.name,
        engine_version=spec.engine.version,
        fits=not problems,
        weights_gib=gib(inputs.weights_bytes),
        kv_bytes_per_token=inputs.attention_bytes_per_token_per_layer * shape.kv_cache_layers,
        kv_tokens=alloc.kv_tokens,
        state_bytes_per_request=inputs.mamba_state_bytes_per_layer * inputs.mamba_layers,
        state_slots=alloc.num_blocks if inputs.mamba_layers else 0,
        max_running_requests=inputs.max_num_seqs,
        memory_fraction=inputs.gpu_memory_utilization,
        reserve_gib=gib(inputs.gpu_total_bytes - alloc.requested_bytes),
        reserve_needed_gib=_reserve_needed_gib(spec),
        problems=problems,
        recommended_args=recommended_args(inputs, alloc),
        terms=memory_terms(inputs, alloc, measured_keys, _kv_budget_source(spec, facts)),
        measured={k: float(v) for k, v in measured_keys.items() if isinstance(v, int | float)},
        notes=_notes(inputs, alloc, shape, args) + (_cpu_notes(cpu) if on_cpu else []),
        details=_details(inputs, alloc),
    )


def _cpu_notes(cpu: CpuBackend) -> list[str]:
    return [
        f"vLLM CPU backend ({cpu.target_env}=cpu): the KV pool is {cpu.kv_space_env} GiB "
        "(else --kv-cache-memory-bytes, else node memory x --gpu-memory-utilization minus the "
        "worker's memory); weights, activations and graphs are not taken from it",
    ]


def recommended_knobs(inputs: VllmInputs, alloc: VllmAllocation) -> tuple[float, int, int]:
    """(gpu_memory_utilization, max_model_len, max_num_seqs) that start, changing the fewest.

    Raise the utilization just enough for one request (up to MAX_UTILIZATION), else cut
    max_model_len to what fits; then cap max_num_seqs at the pool's blocks when FULL CUDA
    graphs need one mamba block per sequence.
    """
    util = inputs.gpu_memory_utilization
    if not alloc.fits_one_request and (needed := utilization_needed(inputs, alloc)) <= (MAX_UTILIZATION):
        util = max(util, needed)
    at_util = allocate(_with_utilization(inputs, util))
    max_len = min(inputs.max_model_len, at_util.largest_max_model_len)
    final = allocate(replace(_with_utilization(inputs, util), max_model_len=max_len))
    seqs = inputs.max_num_seqs
    if inputs.full_cudagraphs and inputs.mamba_layers and final.num_blocks > 0:
        seqs = min(seqs, final.num_blocks)
    return util, max_len, seqs


def _with_utilization(inputs: VllmInputs, util: float) -> VllmInputs:
    """Inputs at another utilization; a measured KV budget moves by the requested delta."""
    measured = inputs.available_kv_bytes_measured
    if measured is not None:
        delta = mem.requested_memory_bytes(inputs.gpu_total_bytes, util) - (
            mem.requested_memory_bytes(inputs.gpu_total_bytes, inputs.gpu_memory_utilization)
        )
        measured += delta
    return replace(inputs, gpu_memory_utilization=util, available_kv_bytes_measured=measured)


def _notes(inputs: VllmInputs, alloc: VllmAllocation, shape: ModelShape, args: EffectiveArgs) -> list[str]:
    notes = [
        f"KV pool: {alloc.num_blocks} blocks of {alloc.block_size_tokens} tokens; one "
        f"{inputs.max_model_len}-token request takes {alloc.blocks_per_request} blocks "
        f"(max concurrency {alloc.max_concurrency:.2f}x)",
        _mamba_speculation_note(inputs, alloc),
        _graph_memory_note(inputs, args),
        _unplanned_draft_note(args),
        _sliding_window_note(shape),
        _vision_note(shape, args),
    ]
    return [note for note in notes if note is not None]


def _mamba_speculation_note(inputs: VllmInputs, alloc: VllmAllocation) -> str | None:
    if not (inputs.num_speculative_tokens and inputs.mamba_layers):
        return None
    extra = alloc.groups.mamba_groups * inputs.num_speculative_tokens
    return (
        f"speculative decoding holds {extra} extra mamba blocks per request and widens "
        "the conv state; for offline bulk generation at high concurrency it often costs "
        "more concurrency than its acceptance returns"
    )


def _graph_memory_note(inputs: VllmInputs, args: EffectiveArgs) -> str | None:
    """How the KV budget treats CUDA graph memory: sized after capture, or the graphs' estimate
    taken out of it first."""
    if args.get_bool("enable_extensible_kv_cache"):
        return (
            "KV sized after CUDA graph capture (enable_extensible_kv_cache, vLLM 0.34+): the pool is the "
            "engine's own measurement of the memory free after the warm-up's peak and the graphs, at "
            f"--gpu-memory-utilization {inputs.gpu_memory_utilization:g}; this plan predicts it from the "
            "same terms (graphs estimated) and `up` checks it against the KV cache size the engine prints"
        )
    if inputs.cudagraph_bytes <= 0:
        return None
    # gpu_worker.py prints the same equivalence at startup
    without = inputs.gpu_memory_utilization - inputs.cudagraph_bytes / inputs.gpu_total_bytes
    return (
        f"--gpu-memory-utilization {inputs.gpu_memory_utilization:.4f} is equivalent to "
        f"{without:.4f} without CUDA graph memory profiling: vLLM takes the "
        f"{gib(inputs.cudagraph_bytes):.2f} GiB graph estimate out of the KV budget first"
    )


def _unplanned_draft_note(args: EffectiveArgs) -> str | None:
    method, _ = _speculative(args)
    if method is None or method in MTP_METHODS or method == "ngram":
        return None
    return (
        f"speculative method {method!r}: the draft model's weights and KV layers are not "
        "planned; calibrate with --from-log"
    )


def _sliding_window_note(shape: ModelShape) -> str | None:
    if not shape.sliding_attention_layers:
        return None
    return (
        f"{shape.sliding_attention_layers} sliding-window layers planned as full attention "
        "(vLLM keeps only their window: the real KV token count is higher)"
    )


def _vision_note(shape: ModelShape, args: EffectiveArgs) -> str | None:
    if not shape.is_multimodal_wrapper or args.get_bool("language_model_only"):
        return None
    return "vision encoder profiling is not in the activation estimate; --language-model-only removes it"


def refuse_other_vllm_footprint(spec: Spec, shape: ModelShape, args: EffectiveArgs, facts: LogFacts) -> None:
    """vLLM prints its KV memory and token count; for attention-only models their ratio is
    the KV bytes per token (mamba groups and sliding windows change the ratio: skipped)."""
    available, tokens = facts.available_kv_gib, facts.kv_tokens
    if available is None or tokens is None:
        return
    if available <= 0 or tokens <= 0 or shape.is_hybrid or shape.sliding_attention_layers:
        return
    inputs = resolve_inputs(spec, shape, args)
    planned = inputs.attention_bytes_per_token_per_layer * inputs.attention_layers
    refuse_footprint(spec, shape, available * GIB / tokens, planned, "KV cache")
