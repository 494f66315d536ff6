"""Builds a tiny random Qwen3 model and its tokenizer locally, with nothing downloaded.

The demo and the real-engine tests need a model that a CPU engine loads in
seconds and that behaves, to the engine, like a real Qwen3 checkpoint: a Qwen3
config, safetensors weights, a fast tokenizer whose vocabulary has the ChatML
and `<think>`/`</think>` tokens, and a chat template that honours
`enable_thinking` as Qwen3's does. Its output is random text; only the plumbing
is real.

This file runs inside an engine venv (it needs torch, transformers and
tokenizers) and imports nothing else from specpilot:

    VENV_PYTHON path/to/tinymodel.py OUT_DIR

Fixed seeds and a fixed training text make two builds byte-identical.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SEED = 0
VOCAB_SIZE = 512
MAX_POSITION_EMBEDDINGS = 4096

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_START = "<think>"
THINK_END = "</think>"
# Control tokens are special (skipped when decoding); the think markers are not,
# as in Qwen3, so reasoning parsers can find them in the text.
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)
PLAIN_ADDED_TOKENS = (THINK_START, THINK_END)

# ChatML, shaped like Qwen3's template: with thinking on, the model opens
# `<think>` itself; with `enable_thinking=false` the prompt carries an empty
# think block, so the answer starts at once.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string else "
    "(message['content'] | map(attribute='text') | join('')) -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)

# A few KB of varied English (prose, code, numbers, chat) for the BPE merges.
_TRAINING_PARAGRAPHS = (
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.",
    "Speculative decoding lets a small draft model propose tokens that a large target "
    "model verifies in one forward pass; accepted tokens are free, rejected ones cost a step.",
    "A GPU has a fixed amount of memory. The weights take a share, activations take another, "
    "and whatever is left holds the key-value cache for every running request.",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(add(i, i * 2))\n",
    "import json\nwith open('data.jsonl') as f:\n    rows = [json.loads(line) for line in f]\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 65536 3.14 2.718 1e-5 -7.",
    "User: What is the capital of France?\nAssistant: The capital of France is Paris.",
    "User: Explain recursion in one sentence.\nAssistant: A function that calls itself on a "
    "smaller input until it reaches a case it can answer directly.",
    "Let me think step by step. First, list what we know. Second, find what is missing. "
    "Third, check the answer against the question before writing it down.",
    "Rain fell on the quiet town all night, and in the morning the rivers were high and brown.",
    "Write a haiku about autumn: red leaves drift and fall, the cold wind carries them home, "
    "the branches stand bare.",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY name LIMIT 10;",
    "The mitochondria is the powerhouse of the cell; it turns food into usable energy.",
    "To sort a list, compare neighbours and swap them when they are out of order, then repeat.",
    "Translate to French: good morning, thank you, see you tomorrow. Bonjour, merci, à demain.",
    "Prime numbers below thirty: 2, 3, 5, 7, 11, 13, 17, 19, 23, 29.",
    "A server that stops answering is taken out, probed, and brought back when it is healthy.",
    "Once upon a time a small robot learned to paint the stars it saw from the workshop window.",
    "Summarize: the meeting moved to Thursday, the budget is approved, and the launch waits.",
    "Why is the sky blue? Sunlight scatters off air molecules, and blue light scatters most.",
)


def training_text() -> list[str]:
    """The tokenizer's training corpus: the paragraphs, repeated so merges have counts."""
    return [*_TRAINING_PARAGRAPHS, *(p.lower() for p in _TRAINING_PARAGRAPHS)] * 4


def build_tokenizer(out_dir: Path) -> Any:
    """Trains a byte-level BPE on the fixed corpus and saves it as a HF fast tokenizer."""
    from tokenizers import (  # type: ignore[import-not-found, unused-ignore]
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast  # type: ignore[import-not-found, unused-ignore]

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(PLAIN_ADDED_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    tokenizer.add_tokens(list(PLAIN_ADDED_TOKENS))
    if tokenizer.get_vocab_size() > VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} tokens > {VOCAB_SIZE}")

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        unk_token=None,
        model_max_length=MAX_POSITION_EMBEDDINGS,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def build_tiny_model(out_dir: Path | str) -> Path:
    """Writes config, safetensors weights, generation config and tokenizer into `out_dir`."""
    import torch  # type: ignore[import-not-found, unused-ignore]
    from transformers import (  # type: ignore[import-not-found, unused-ignore]
        GenerationConfig,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out)
    pad_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)

    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(
        bos_token_id=pad_id,
        eos_token_id=[eos_id, pad_id],
        pad_token_id=pad_id,
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
    ).save_pretrained(str(out))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: VENV_PYTHON tinymodel.py OUT_DIR", file=sys.stderr)
        return 2
    out = build_tiny_model(argv[0])
    config = json.loads((out / "config.json").read_text())
    print(json.dumps({"model_dir": str(out), "architectures": config.get("architectures")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
