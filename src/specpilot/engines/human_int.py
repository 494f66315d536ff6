"""vLLM's human-readable integers (its `human_readable_int`): here, below the engine packages,
because the shared flag readers (`argv`, `ranges`) parse them too."""

from __future__ import annotations

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(text: str) -> int:
    """vLLM's human_readable_int: 32768, 25.6k (x1000), 32K (x1024), 8G (x2**30); ValueError else."""
    value = text.strip()
    if value and value[-1] in _DECIMAL:
        return int(float(value[:-1]) * _DECIMAL[value[-1]])
    if value and value[-1] in _BINARY:
        return int(float(value[:-1]) * _BINARY[value[-1]])
    return int(value)
