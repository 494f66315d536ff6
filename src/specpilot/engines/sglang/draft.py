"""SGLang's speculative methods and how k draft tokens are written: SGLang counts the root
token in `--speculative-num-draft-tokens`, so k draft tokens are `--speculative-num-steps k
--speculative-eagle-topk 1 --speculative-num-draft-tokens k+1` (the published Qwen3.6 recipes'
"3 draft tokens" is steps 3, draft tokens 4). The block drafters draft in one step: DFLASH's k
is its block (`--speculative-num-draft-tokens k`, steps and topk 1), DSPARK's its gamma
(`--speculative-dspark-block-size k`, k+1 draft tokens), as their handlers in
arg_groups/speculative_hook.py require."""

from __future__ import annotations

from specpilot.engines.argv import ReadArgv
from specpilot.engines.draft import DraftKnobs

#: SGLang's `--speculative-algorithm` values that run a draft model (NGRAM does not).
DRAFT_MODEL_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "DFLASH", "DSPARK"})
#: Every value SGLang accepts; NEXTN is an alias of EAGLE (speculative_hook.py).
SPECULATIVE_ALGORITHMS = DRAFT_MODEL_ALGORITHMS | {"NGRAM", "FROZEN_KV_MTP"}


def _sglang_method(read: ReadArgv) -> str | None:
    use = read.last("speculative_algorithm")
    return use.text.upper() if use is not None and use.text else None


#: the flag that holds a method's k where it is not --speculative-num-steps
K_FLAG = {"DFLASH": "speculative_num_draft_tokens", "DSPARK": "speculative_dspark_block_size"}


def _sglang_draft_tokens(read: ReadArgv) -> int:
    use = read.last(K_FLAG.get(_sglang_method(read) or "", "speculative_num_steps"))
    return int(use.text) if use is not None and use.text and use.text.isascii() and use.text.isdigit() else 0


def _sglang_args(read: ReadArgv, method: str, k: int) -> tuple[str, ...]:
    one_step = ("--speculative-num-steps", "1", "--speculative-eagle-topk", "1")
    if method == "DFLASH":
        return ("--speculative-algorithm", method, *one_step, "--speculative-num-draft-tokens", str(k))
    if method == "DSPARK":
        return (
            "--speculative-algorithm", method, *one_step,
            "--speculative-dspark-block-size", str(k), "--speculative-num-draft-tokens", str(k + 1),
        )  # fmt: skip
    return (
        "--speculative-algorithm", method,
        "--speculative-num-steps", str(k),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(k + 1),
    )  # fmt: skip


DRAFT = DraftKnobs(
    frozenset(SPECULATIVE_ALGORITHMS),
    _sglang_method,
    _sglang_draft_tokens,
    _sglang_args,
    False,
    running_cap_flag="--max-running-requests",
    memory_fraction_flag="--mem-fraction-static",
    # 0.5.23+ (its flag table): speculation switched off per batch from 64 running requests
    adaptive_flag="--speculative-adaptive",
)
