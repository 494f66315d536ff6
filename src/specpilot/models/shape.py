"""Everything GPU memory depends on, read from a Hugging Face `config.json`.

Hybrid models (Qwen3-Next, Qwen3.5/3.6) mix full-attention layers, which keep
a KV cache that grows with every token, and Gated-DeltaNet (linear-attention)
layers, which keep a fixed-size conv + SSM state per request. A planner that
counts every layer as attention over-estimates KV by 4x on these models; one
that forgets the state under-estimates per-request memory. So the shape keeps
the kind of every layer.

Multimodal wrappers (`Qwen3_5ForConditionalGeneration`) keep the language
model's numbers under `text_config`; the architecture name stays the wrapper's,
because engine rules are keyed on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specpilot.dtypes import DTYPE_BYTES
from specpilot.errors import UserError
from specpilot.models.files import ModelFiles, read_local_model

#: model types whose attention has an output gate (q_proj twice as wide) without saying so in config
_GATED_ATTENTION_TYPES = frozenset({"qwen3_next"})

#: architectures whose layers this module reads and whose plans were checked against engine
#: logs; another architecture is planned as plain attention + MLP layers, with a warning
PLANNED_ARCHITECTURES = frozenset(
    {
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "LlamaForCausalLM",
        "MistralForCausalLM",
    }
)
#: the linear-attention (Gated DeltaNet) numbers a hybrid model's state size is made of
LINEAR_ATTENTION_KEYS = (
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"
SLIDING_ATTENTION = "sliding_attention"


def dtype_bytes(dtype: str) -> float:
    """Bytes per element; a clear error for a dtype specpilot does not know."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise UserError(
            f"unknown dtype {dtype!r}",
            field="dtype",
            fix=f"use one of {', '.join(sorted({'bfloat16', 'float16', 'float32', 'fp8'}))}",
        ) from None


@dataclass(frozen=True)
class ModelShape:
    """The numbers memory planning needs, for the language model of a checkpoint."""

    architecture: str
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    layer_kinds: tuple[str, ...]
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    sliding_window: int | None
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    mamba_ssm_dtype: str
    intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    mtp_num_layers: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    torch_dtype: str
    param_count: int
    param_count_source: str
    mtp_param_count: int
    vision_param_count: int
    is_multimodal_wrapper: bool
    #: the vision tower's `num_hidden_layers` and `hidden_size` as its config.json spells them
    #: (0 when absent: Qwen3.5/3.6 write `depth`, and SGLang then assumes 24 layers)
    vision_num_hidden_layers: int = 0
    vision_hidden_size: int = 0
    #: MLA (DeepSeek-style) compressed KV; 0 for ordinary attention
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    attn_output_gate: bool = False
    #: config.json as read (for what the engines derive from it, e.g. the context length)
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def full_attention_layers(self) -> int:
        return self.layer_kinds.count(FULL_ATTENTION)

    @property
    def linear_attention_layers(self) -> int:
        return self.layer_kinds.count(LINEAR_ATTENTION)

    @property
    def sliding_attention_layers(self) -> int:
        return self.layer_kinds.count(SLIDING_ATTENTION)

    @property
    def kv_cache_layers(self) -> int:
        """Layers that keep a KV cache. Both planners count a sliding-window layer in full:
        vLLM gives them groups of their own that hold only the window and SGLang a smaller pool,
        so this over-counts (safe side)."""
        return self.full_attention_layers + self.sliding_attention_layers

    @property
    def is_hybrid(self) -> bool:
        """Has per-request recurrent state (Gated DeltaNet / mamba layers)."""
        return self.linear_attention_layers > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def rotary_dim(self) -> int:
        """Dimensions of a head that rotary embedding turns (all of it unless partial)."""
        return int(self.head_dim * partial_rotary_factor(self.config))


def partial_rotary_factor(config: Mapping[str, Any]) -> float:
    """The rotated share of a head, from rope_parameters / rope_scaling or the top level
    (text_config for wrappers); 1.0 when the config says nothing."""
    text = config.get("text_config") or config
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    return float(rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0)))


#: `layer_types` entries as the configs spell them; another spelling is full attention
_LAYER_TYPE_NAMES = {
    "full_attention": FULL_ATTENTION,
    "attention": FULL_ATTENTION,
    "linear_attention": LINEAR_ATTENTION,
    "mamba": LINEAR_ATTENTION,
    "sliding_attention": SLIDING_ATTENTION,
    "sliding_window": SLIDING_ATTENTION,
}


def _layer_kinds(text: dict[str, Any], num_layers: int) -> tuple[str, ...]:
    """Kinds per layer from `layer_types`, `full_attention_interval` or sliding-window settings."""
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        return tuple(_LAYER_TYPE_NAMES.get(str(kind), FULL_ATTENTION) for kind in layer_types)
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return tuple(
            FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers)
        )
    if text.get("sliding_window") and text.get("use_sliding_window"):
        return _sliding_kinds(text, num_layers)
    return (FULL_ATTENTION,) * num_layers


def _sliding_kinds(text: dict[str, Any], num_layers: int) -> tuple[str, ...]:
    """Layers from `max_window_layers` on slide; the ones below attend in full."""
    max_window_layers = int(text.get("max_window_layers", num_layers))
    return tuple(SLIDING_ATTENTION if i >= max_window_layers else FULL_ATTENTION for i in range(num_layers))


def _safetensors_params(headers: Sequence[Mapping[str, Any]]) -> tuple[int, int, int] | None:
    """(total, mtp, vision) parameter counts from safetensors headers, or None without weights."""
    if not headers:
        return None
    total = mtp = vision = 0
    for header in headers:
        for key, info in header.items():
            if key == "__metadata__":
                continue
            count = 1
            for dim in info["shape"]:
                count *= int(dim)
            total += count
            if "mtp." in key or key.startswith("mtp"):
                mtp += count
            elif "visual" in key or "vision" in key:
                vision += count
    return total, mtp, vision


def _attention_params(t: _Text) -> int:
    q_out = t.heads * t.head_dim * (2 if t.attn_output_gate else 1)
    kv_out = 2 * t.kv_heads * t.head_dim
    return t.hidden * (q_out + kv_out) + t.heads * t.head_dim * t.hidden


def _linear_attention_params(t: _Text) -> int:
    key_dim, value_dim = t.lk_heads * t.lk_dim, t.lv_heads * t.lv_dim
    in_proj = t.hidden * (2 * key_dim + 2 * value_dim + 2 * t.lv_heads)
    conv = (2 * key_dim + value_dim) * t.conv_kernel
    return in_proj + conv + value_dim * t.hidden + 2 * t.lv_heads + t.lv_dim


def _mlp_params(t: _Text) -> int:
    if t.experts:
        routed = t.experts * 3 * t.hidden * t.moe_inter
        shared = 3 * t.hidden * t.shared_inter + (t.hidden if t.shared_inter else 0)
        return routed + shared + t.hidden * t.experts
    return 3 * t.hidden * t.inter


@dataclass(frozen=True)
class _Text:
    """Short names for the text config numbers the parameter estimate needs."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    attn_output_gate: bool
    lk_heads: int
    lk_dim: int
    lv_heads: int
    lv_dim: int
    conv_kernel: int
    inter: int
    experts: int
    moe_inter: int
    shared_inter: int


def _estimated_params(
    t: _Text, kinds: tuple[str, ...], vocab: int, tied: bool, mtp_layers: int
) -> tuple[int, int]:
    """(language model incl. MTP, MTP alone) estimated from the shape: matrices only,
    norms ignored (they are < 0.01% of a model)."""
    layers = sum(
        (_linear_attention_params(t) if kind == LINEAR_ATTENTION else _attention_params(t)) + _mlp_params(t)
        for kind in kinds
    )
    embeddings = vocab * t.hidden * (1 if tied else 2)
    # An MTP module is one decoder layer plus the projection of [embedding; hidden] back to hidden.
    mtp = mtp_layers * (_attention_params(t) + _mlp_params(t) + 2 * t.hidden * t.hidden)
    return layers + embeddings + mtp, mtp


def _vision_params_estimate(vision: dict[str, Any]) -> int:
    """ViT blocks plus, where the config names them, the patch embedding, the learned
    position table and the patch merger into the language model's width (Qwen-VL style)."""
    hidden = int(vision.get("hidden_size", 0))
    depth = int(vision.get("depth", vision.get("num_hidden_layers", 0)))
    inter = int(vision.get("intermediate_size", 4 * hidden))
    blocks = depth * (4 * hidden * hidden + 2 * hidden * inter)
    patch = int(vision.get("patch_size", 0))
    patch_embed = (
        int(vision.get("in_channels", 3)) * int(vision.get("temporal_patch_size", 1)) * patch**2 * hidden
    )
    positions = int(vision.get("num_position_embeddings", 0)) * hidden
    out_hidden = int(vision.get("out_hidden_size", 0))
    merged = hidden * int(vision.get("spatial_merge_size", 1)) ** 2
    merger = merged * merged + merged * out_hidden if out_hidden else 0
    return blocks + patch_embed + positions + merger


class _ConfigNumbers:
    """Integer fields of a config, each checked: an int (not a bool, not a string), >= 0."""

    def __init__(self, text: dict[str, Any], config_file: str) -> None:
        self.text, self.config_file = text, config_file

    def _bad(self, key: str, value: object, wanted: str) -> UserError:
        return UserError(
            f"{self.config_file}: {key} = {value!r} is not {wanted}",
            field="[model] path",
            fix="use the model's own config.json, unedited",
        )

    def get(self, *keys: str, default: int = 0, fallback: dict[str, Any] | None = None) -> int:
        """The first of `keys` that is set (not null, not 0), else `default`."""
        for key in keys:
            value = self.text.get(key)
            if value is None and fallback is not None:
                value = fallback.get(key)
            if value is not None and (checked := self._checked(key, value)):
                return checked
        return default

    def _checked(self, key: str, value: Any) -> int:
        """`value` as an int, refused unless a whole number >= 0."""
        whole = isinstance(value, int | float) and math.isfinite(value) and value == int(value)
        if isinstance(value, bool) or not whole:
            raise self._bad(key, value, "a whole number")
        if value < 0:
            raise self._bad(key, value, "zero or more")
        return int(value)

    def need(self, key: str) -> int:
        """A key the plan cannot do without: present and at least 1."""
        if key not in self.text:
            raise UserError(
                f"config.json has no {key!r}",
                field="[model] path",
                fix="use the model's own config.json",
            )
        value = self.get(key)
        if value < 1:
            raise self._bad(key, self.text[key], "1 or more")
        return value


def load_model_shape(model_path: str | Path) -> ModelShape:
    """Read a model directory (or a config.json path) on this machine into a ModelShape."""
    return shape_from_files(read_local_model(Path(model_path).expanduser()))


def shape_from_files(files: ModelFiles) -> ModelShape:
    """The ModelShape of a model's config.json and safetensors headers, wherever they were read."""
    config = files.config
    text = _text_config(config)
    numbers = _ConfigNumbers(text, "config.json")
    number = numbers.get
    hidden = numbers.need("hidden_size")
    num_layers = numbers.need("num_hidden_layers")
    heads = numbers.need("num_attention_heads")
    kinds = _layer_kinds(text, num_layers)
    if LINEAR_ATTENTION in kinds:
        _require_linear_keys(numbers)
    t = _text_numbers(text, numbers, hidden, heads)
    vocab = number("vocab_size", fallback=config)
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    mtp_layers = number("mtp_num_hidden_layers", "num_nextn_predict_layers")
    torch_dtype = _torch_dtype(text, config)
    vision = _vision_config(config)
    params, mtp_params, vision_params, source = _param_counts(
        files, t, kinds, vocab, tied, mtp_layers, vision
    )
    return ModelShape(
        architecture=str((config.get("architectures") or [config.get("model_type", "unknown")])[0]),
        model_type=str(text.get("model_type", config.get("model_type", ""))),
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        layer_kinds=kinds,
        num_attention_heads=heads,
        num_key_value_heads=t.kv_heads,
        head_dim=t.head_dim,
        sliding_window=text.get("sliding_window"),
        linear_num_key_heads=t.lk_heads,
        linear_num_value_heads=t.lv_heads,
        linear_key_head_dim=t.lk_dim,
        linear_value_head_dim=t.lv_dim,
        linear_conv_kernel_dim=t.conv_kernel,
        mamba_ssm_dtype=str(text.get("mamba_ssm_dtype") or "float32"),
        intermediate_size=t.inter,
        num_experts=t.experts,
        num_experts_per_tok=number("num_experts_per_tok"),
        moe_intermediate_size=t.moe_inter,
        shared_expert_intermediate_size=t.shared_inter,
        mtp_num_layers=mtp_layers,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=number("max_position_embeddings"),
        torch_dtype=torch_dtype,
        param_count=params,
        param_count_source=source,
        mtp_param_count=mtp_params,
        vision_param_count=vision_params,
        is_multimodal_wrapper="text_config" in config,
        vision_num_hidden_layers=int(vision.get("num_hidden_layers") or 0),
        vision_hidden_size=int(vision.get("hidden_size") or 0),
        kv_lora_rank=number("kv_lora_rank"),
        qk_rope_head_dim=number("qk_rope_head_dim"),
        attn_output_gate=t.attn_output_gate,
        config=config,
    )


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: `text_config` in a multimodal wrapper, else the config."""
    text = config.get("text_config") or config
    if not isinstance(text, dict):
        raise UserError(
            "config.json's text_config is not an object",
            field="[model] path",
            fix="use the model's own config.json, unedited",
        )
    return text


def _require_linear_keys(numbers: _ConfigNumbers) -> None:
    """A hybrid model's linear-attention numbers: without them the per-request state would be
    planned as zero bytes (a verdict flip)."""
    missing = [key for key in LINEAR_ATTENTION_KEYS if numbers.get(key) < 1]
    if missing:
        raise UserError(
            f"config.json describes linear-attention layers but has no {', '.join(missing)}",
            field="[model] path",
            fix="use the model's own config.json, unedited (a hybrid model's state size needs them)",
        )


def _text_numbers(text: dict[str, Any], numbers: _ConfigNumbers, hidden: int, heads: int) -> _Text:
    """The text config's numbers the parameter estimate and the shape read."""
    number = numbers.get
    t = _Text(
        hidden=hidden,
        heads=heads,
        kv_heads=number("num_key_value_heads", default=heads),
        head_dim=number("head_dim", default=hidden // heads),
        attn_output_gate=bool(text.get("attn_output_gate", text.get("model_type") in _GATED_ATTENTION_TYPES)),
        lk_heads=number("linear_num_key_heads"),
        lk_dim=number("linear_key_head_dim"),
        lv_heads=number("linear_num_value_heads"),
        lv_dim=number("linear_value_head_dim"),
        conv_kernel=number("linear_conv_kernel_dim"),
        inter=number("intermediate_size"),
        experts=number("num_experts", "n_routed_experts", "num_local_experts"),
        moe_inter=number("moe_intermediate_size"),
        shared_inter=number("shared_expert_intermediate_size"),
    )
    if t.head_dim < 1:
        raise numbers._bad("head_dim", text.get("head_dim"), "1 or more")
    return t


def _torch_dtype(text: dict[str, Any], config: dict[str, Any]) -> str:
    torch_dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    if torch_dtype not in DTYPE_BYTES:
        raise UserError(
            f"config.json's torch_dtype {torch_dtype!r} is not a dtype specpilot knows",
            field="[model] path",
            fix="use the model's own config.json, unedited (bfloat16, float16, float32 or fp8)",
        )
    return torch_dtype


def _vision_config(config: dict[str, Any]) -> dict[str, Any]:
    """A multimodal wrapper's `vision_config` ({} for a text-only model)."""
    vision = config.get("vision_config") if "text_config" in config else None
    return vision if isinstance(vision, dict) else {}


def _param_counts(
    files: ModelFiles,
    t: _Text,
    kinds: tuple[str, ...],
    vocab: int,
    tied: bool,
    mtp_layers: int,
    vision: dict[str, Any],
) -> tuple[int, int, int, str]:
    """(total, MTP, vision parameters, source): counted in the safetensors headers where
    there are weights, else estimated from the shape."""
    measured = _safetensors_params(files.safetensors_headers)
    if measured is not None:
        return (*measured, "safetensors")
    params, mtp_params = _estimated_params(t, kinds, vocab, tied, mtp_layers)
    vision_params = _vision_params_estimate(vision) if vision else 0
    return params + vision_params, mtp_params, vision_params, "shape"
