"""What a launch's flags say the user meant: speculation, memory, parallelism, the model.

`check --fix` may change such a flag's value (the engine's own fix) or its spelling (a typo,
a renamed flag), never delete it: a server started without the speculation, memory limits,
parallelism or model the user asked for is the incident again, a process running other
flags than the ones intended. Such a removal is refused and named instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.check.parse import nearest_flags
from specpilot.engines.argv import resolve
from specpilot.engines.flags import ReleaseTable, former_flags

#: intent -> words of a flag's dest (`speculative_num_steps`) that carry it; the first match wins
INTENT_WORDS: Mapping[str, tuple[str, ...]] = {
    "speculation": ("speculative", "eagle", "draft", "mtp"),
    "memory": (
        "mem_fraction",
        "memory",
        "mamba",
        "max_running_requests",
        "max_total_tokens",
        "kv_cache",
        "context_length",
        "max_model_len",
        "chunked_prefill",
        "max_num_seqs",
        "max_num_batched_tokens",
        "prefill_max_requests",
        "radix",
        "prefix_caching",
        "swap_space",
        "cpu_offload",
    ),
    "parallelism": (
        "tp_size",
        "tensor_parallel",
        "pp_size",
        "pipeline_parallel",
        "dp_size",
        "data_parallel",
        "ep_size",
        "expert_parallel",
        "dp_attention",
        "nnodes",
    ),
    "model": ("model", "tokenizer", "quantization", "dtype", "revision", "load_format", "trust_remote_code"),
}


def intent_of_name(name: str) -> str | None:
    """The intent a dest or a spelling (`--mem-fraction-static`) carries, or None."""
    words = name.lstrip("-").replace("-", "_").lower()
    return next((kind for kind, parts in INTENT_WORDS.items() if any(p in words for p in parts)), None)


def intent_of_option(table: ReleaseTable, typed: str) -> str | None:
    """The intent of an option as typed: its flag's; for one this release lacks, its former
    flag's, its own words' or its nearest flag's (`--speculative-algoritm` is speculation)."""
    _, flag = resolve(table, typed)
    flag = flag or former_flags(table).get(typed)
    if flag is not None:
        return intent_of_name(flag.dest)
    near = [intent_of_name(f.dest) for f in nearest_flags(table, typed)]
    return intent_of_name(typed) or next((kind for kind in near if kind), None)
