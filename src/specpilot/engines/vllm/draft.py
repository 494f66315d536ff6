"""vLLM's speculative methods (every one some supported release's rules know) and how k draft
tokens are written: `num_speculative_tokens` in `--speculative-config`."""

from __future__ import annotations

import json

from specpilot.engines.argv import ReadArgv, json_object
from specpilot.engines.draft import DraftKnobs
from specpilot.engines.vllm.rules import SPEC_METHODS


def _vllm_config(read: ReadArgv) -> dict[str, object]:
    use = read.last("speculative_config")
    if use is None or use.text is None:
        return {}
    try:
        return json_object(json.loads(use.text))
    except (ValueError, TypeError):
        return {}


def _vllm_method(read: ReadArgv) -> str | None:
    method = _vllm_config(read).get("method")
    return str(method) if method else None


def _vllm_draft_tokens(read: ReadArgv) -> int:
    count = _vllm_config(read).get("num_speculative_tokens")
    return count if isinstance(count, int) else 0


def _vllm_args(read: ReadArgv, method: str, k: int) -> tuple[str, ...]:
    config = {**_vllm_config(read), "method": method, "num_speculative_tokens": k}
    return ("--speculative-config", json.dumps(config, separators=(",", ":")))


DRAFT = DraftKnobs(
    frozenset(m for known in SPEC_METHODS for m in known.methods),
    _vllm_method,
    _vllm_draft_tokens,
    _vllm_args,
    True,
    running_cap_flag="--max-num-seqs",
    memory_fraction_flag="--gpu-memory-utilization",
)
