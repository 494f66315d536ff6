"""Model shapes from config.json: layer kinds, dims, and parameter counts."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from specpilot.errors import UserError
from specpilot.models import load_model_shape

QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "max_position_embeddings": 40960,
}

HYBRID_TEXT = {
    "model_type": "qwen3_5_text",
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 1000,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mtp_num_hidden_layers": 1,
    "mamba_ssm_dtype": "float32",
}


def write_config(tmp_path: Path, config: dict[str, object]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_dense_model_counts_all_layers_as_attention(tmp_path: Path) -> None:
    shape = load_model_shape(write_config(tmp_path, QWEN3_8B))
    assert shape.full_attention_layers == 36
    assert not shape.is_hybrid
    # Qwen3-8B is published as 8.2B parameters.
    assert 8.1e9 < shape.param_count < 8.3e9
    assert shape.param_count_source == "shape"


def test_multimodal_wrapper_reads_text_config(tmp_path: Path) -> None:
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": HYBRID_TEXT}
    shape = load_model_shape(write_config(tmp_path, config))
    assert shape.architecture == "Qwen3_5ForConditionalGeneration"
    assert shape.is_multimodal_wrapper
    assert shape.layer_kinds == ("linear_attention",) * 3 + ("full_attention",) + (
        "linear_attention",
    ) * 3 + ("full_attention",)
    assert (shape.full_attention_layers, shape.linear_attention_layers) == (2, 6)
    assert shape.linear_key_dim == 16 * 128
    assert shape.mtp_num_layers == 1
    assert shape.mtp_param_count > 0


def test_layer_types_list_wins(tmp_path: Path) -> None:
    kinds = ["linear_attention", "full_attention"] * 4
    shape = load_model_shape(write_config(tmp_path, {**HYBRID_TEXT, "layer_types": kinds}))
    assert list(shape.layer_kinds) == kinds


def test_safetensors_headers_give_exact_counts(tmp_path: Path) -> None:
    write_config(tmp_path, QWEN3_8B)
    header = {
        "model.embed_tokens.weight": {"dtype": "BF16", "shape": [10, 4], "data_offsets": [0, 80]},
        "mtp.fc.weight": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [80, 96]},
        "__metadata__": {"format": "pt"},
    }
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 96)
    shape = load_model_shape(tmp_path)
    assert (shape.param_count, shape.mtp_param_count, shape.param_count_source) == (
        48,
        8,
        "safetensors",
    )


def test_config_path_directly(tmp_path: Path) -> None:
    path = write_config(tmp_path, QWEN3_8B) / "config.json"
    assert load_model_shape(path).hidden_size == 4096


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "no config.json"),
        (lambda p: (p / "config.json").write_text("{") and p, "not valid JSON"),
        (lambda p: (p / "config.json").write_text("{}") and p, "no 'hidden_size'"),
    ],
)
def test_bad_model_paths(tmp_path: Path, make: object, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_model_shape(make(tmp_path))  # type: ignore[operator]


def test_estimates_match_published_totals() -> None:
    """Published parameter totals: Qwen3-Next-80B-A3B 79,674,391,296 (safetensors), Qwen3-30B-A3B 30.5B."""
    examples = Path(__file__).parents[2] / "examples" / "models"
    next80 = load_model_shape(examples / "qwen3-next-80b-a3b")
    assert next80.attn_output_gate
    assert abs(next80.param_count / 79_674_391_296 - 1) < 1e-3
    assert (next80.full_attention_layers, next80.linear_attention_layers) == (12, 36)
    moe30 = load_model_shape(examples / "qwen3-30b-a3b")
    assert abs(moe30.param_count / 30.5e9 - 1) < 0.01
