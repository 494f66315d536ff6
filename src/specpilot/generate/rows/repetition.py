"""Degenerate repetition: an answer that loops, measured as the share of its word n-grams that
repeat an earlier one (rep-n, Welleck et al. 2019, "Neural Text Generation with Unlikelihood
Training"). Natural text, reasoning included, stays far below `REPETITION_SHARE`; a model
stuck in a loop (the same sentence again and again until max_tokens) is near 1.

Words are runs of letters or digits, each CJK character one word (those scripts write no
spaces), and each punctuation mark one word, so the measure does not depend on a tokenizer.
"""

from __future__ import annotations

import re

#: words per n-gram
REPETITION_NGRAM = 4
#: at least this many n-grams before an answer is judged (a short answer cannot loop much)
REPETITION_MIN_NGRAMS = 64
#: an answer whose share of repeated n-grams is above this is flagged `repetitive`
REPETITION_SHARE = 0.5

_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[^\W_]+|[^\w\s]")


def repeated_ngram_share(text: str, n: int = REPETITION_NGRAM) -> float:
    """The share of the text's word n-grams that repeat an earlier one (0 for a short text)."""
    words = _WORD.findall(text.lower())
    total = len(words) - n + 1
    if total < REPETITION_MIN_NGRAMS:
        return 0.0
    unique = len({tuple(words[i : i + n]) for i in range(total)})
    return 1.0 - unique / total


def is_repetitive(text: str) -> bool:
    return repeated_ngram_share(text) > REPETITION_SHARE
