"""How each engine derives a model's longest context from its config.json.

A `--max-model-len` (vLLM) or `--context-length` (SGLang) above this is refused at
start unless the engine's override variable is set; `check` says so before a start.
Each function re-states its engine's own derivation (sources in the docstrings);
None means the engine would find no length in the config and accept any value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

ContextLen = Callable[[Mapping[str, Any]], int | None]


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config (multimodal wrappers nest it as `text_config`)."""
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _rope(text: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """rope_scaling / rope_parameters as a list (Transformers 5 may key it by layer type)."""
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if not isinstance(rope, Mapping):
        return []
    if rope and all(isinstance(v, Mapping) for v in rope.values()):
        return list(rope.values())
    return [rope]


#: vLLM `_get_and_verify_max_len` (vllm/config/model.py, 0.26-0.32): the smallest of these
VLLM_LENGTH_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)  # fmt: skip


def vllm_context_len(config: Mapping[str, Any]) -> int | None:
    """vLLM: the smallest length key (model_max_length wins when set), times the RoPE
    factor except for su/longrope/llama3; yarn starts from original_max_position_embeddings.
    A value up to `model_max_length` is accepted even above that (the returned bound)."""
    text = _text_config(config)
    lengths = [text[k] for k in VLLM_LENGTH_KEYS if isinstance(text.get(k), int | float)]
    if not lengths:
        return None
    model_max_length = text.get("model_max_length")
    bound = model_max_length if isinstance(model_max_length, int | float) else None
    derived = float(bound) if bound else float(min(lengths))
    if "gemma3" not in str(text.get("model_type", "")):
        derived = _vllm_rope_scaled(text, derived)
    if bound is not None and bound > derived:
        derived = float(bound)
    return int(derived)


def _vllm_rope_scaled(text: Mapping[str, Any], derived: float) -> float:
    """`derived` times the last RoPE factor that scales (su/longrope/llama3 do not); yarn
    starts from its original_max_position_embeddings."""
    factor = 1.0
    for params in _rope(text):
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type in ("su", "longrope", "llama3"):
            continue
        factor = float(params.get("factor", factor))
        if rope_type == "yarn" and isinstance(params.get("original_max_position_embeddings"), int):
            derived = float(params["original_max_position_embeddings"])
    return derived * factor


#: SGLang `get_context_length` (sglang/srt/utils/hf_transformers_utils.py): the first of these
SGLANG_LENGTH_KEYS = (
    "max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings",
)  # fmt: skip


def sglang_context_len(config: Mapping[str, Any]) -> int | None:
    """SGLang: the first length key found, times rope_scaling's factor unless the scaling
    names original_max_position_embeddings or is llama3; 2048 when no key is present."""
    text = _text_config(config)
    factor = 1.0
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if isinstance(rope, Mapping) and rope:
        factor = float(rope.get("factor", 1))
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1.0
    for key in SGLANG_LENGTH_KEYS:
        value = text.get(key)
        if isinstance(value, int | float):
            return int(factor * value)
    return 2048


def requested_tokens(value: object) -> int | None:
    """A length flag's value in tokens: 8192, 32K (x1024), 25.6k (x1000); None for auto/-1."""
    text = str(value).strip() if value is not None else ""
    units = {"k": 10**3, "m": 10**6, "K": 2**10, "M": 2**20}
    try:
        number = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        return None
    return int(number) if number > 0 else None
