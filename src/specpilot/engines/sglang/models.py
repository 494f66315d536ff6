"""Model-class facts SGLang's validation branches on (from the releases' model-specific handlers).

Which HF architectures SGLang serves with a mamba (linear-attention state) radix cache, and
which of those support the `extra_buffer` strategy. Read from `_handle_model_specific_adjustments`
(0.5.10.post1-0.5.13.post1), `_support_mamba_cache_extra_buffer` (0.5.14) and
`_MAMBA_EXTRA_BUFFER_ARCHS` (0.5.23).
"""

from __future__ import annotations

#: hybrid architectures whose radix cache keeps mamba state (`uses_mamba_radix_cache`)
MAMBA_RADIX_ARCHS: frozenset[str] = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM",
        "FalconH1ForCausalLM",
        "JetNemotronForCausalLM",
        "JetVLMForConditionalGeneration",
        "GraniteMoeHybridForCausalLM",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "Lfm2ForCausalLM",
        "ZayaForCausalLM",
    }
)

#: hybrid architectures whose mamba radix cache supports `extra_buffer` (with the triton
#: linear-attention backend, SGLang's default)
EXTRA_BUFFER_ARCHS: frozenset[str] = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
    }
)

#: `auto_choose_speculative_params`: (num_steps, eagle_topk, num_draft_tokens) per architecture
SPEC_PARAMS_DEFAULT: tuple[int, int, int] = (3, 1, 4)
SPEC_PARAMS_BY_ARCH: dict[str, tuple[int, int, int]] = {
    "LlamaForCausalLM": (5, 4, 8),
    "Grok1ForCausalLM": (5, 4, 8),
    "Grok1VForCausalLM": (5, 4, 8),
}
