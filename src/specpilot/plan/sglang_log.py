"""Read the numbers an SGLang startup log prints, for calibration and plan checks.

The lines (all releases 0.5.10-0.5.23 print them; "GB" means GiB), shortened:

    Load weight begin. avail mem=78.50 GB
    Load weight end. ... type=Qwen3_5ForConditionalGeneration, ... avail mem=50.01 GB,
        mem usage=28.47 GB.
    Mamba Cache is allocated. max_mamba_cache_size: 124, conv_state size: 0.34GB, ...
    KV Cache is allocated. dtype: torch.bfloat16, #tokens: 330323, K size: 10.08 GB, ...
    max_total_num_tokens=330323, ..., max_running_requests=24, context_len=262144, ...

With speculative decoding a second "Load weight end" is the draft model's and a
second "KV Cache is allocated" its KV pool; the first of each is the target's.
"""

from __future__ import annotations

import re
from typing import Any

_FLOAT = r"(\d+(?:\.\d+)?)"
_LOAD_BEGIN = re.compile(rf"Load weight begin\..*?avail mem={_FLOAT} ?GB")
_LOAD_END = re.compile(
    rf"Load weight end\..*?(?:type=(\w+).*?)?avail mem={_FLOAT} ?GB, mem usage={_FLOAT} ?GB"
)
_KV = re.compile(r"KV Cache is allocated\..*?#tokens: (\d+)")
_MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+)")
_SCHEDULER = re.compile(r"max_total_num_tokens=(\d+).*?max_running_requests=(\d+)")
_CAPPED = re.compile(r"max_running_requests is capped to (\d+) by the mamba state cache")
_CONTEXT = re.compile(r"context_len=(\d+)")
_CHUNKED = re.compile(r"chunked_prefill_size=(-?\d+)")
_FRACTION = re.compile(rf"mem_fraction_static={_FLOAT}")
_TP = re.compile(r"\btp_size=(\d+)")
_VERSION = re.compile(
    r"\bsglang(?:[ _-]?version)?\s*(?:==|=|:|\s)\s*v?(\d+\.\d+\.\d+(?:\.post\d+)?)", re.IGNORECASE
)


def _first(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    return pattern.search(text)


def parse_sglang_log(text: str) -> dict[str, Any]:
    """Numbers from an SGLang startup log; keys are absent when the log lacks the line.

    Keys: version, architecture, free_before_load_gib, weights_gib, draft_weights_gib,
    kv_tokens, draft_kv_tokens, max_mamba_cache_size, max_running_requests, context_len,
    chunked_prefill_size, mem_fraction_static, tp_size.
    """
    found: dict[str, Any] = {}
    if match := _first(_VERSION, text):
        found["version"] = match.group(1)
    loads = list(_LOAD_END.finditer(text))
    if loads:
        architecture, avail, usage = loads[0].groups()
        if architecture:
            found["architecture"] = architecture
        found["weights_gib"] = float(usage)
        found["free_before_load_gib"] = round(float(avail) + float(usage), 2)
        if len(loads) > 1:
            found["draft_weights_gib"] = float(loads[1].group(3))
    if match := _first(_LOAD_BEGIN, text):
        found["free_before_load_gib"] = float(match.group(1))
    kv = _KV.findall(text)
    if kv:
        found["kv_tokens"] = int(kv[0])
        if len(kv) > 1 and len(loads) > 1:
            found["draft_kv_tokens"] = int(kv[1])
    if match := _first(_MAMBA, text):
        found["max_mamba_cache_size"] = int(match.group(1))
    if match := _first(_SCHEDULER, text):
        found.setdefault("kv_tokens", int(match.group(1)))
        found["max_running_requests"] = int(match.group(2))
    elif match := _first(_CAPPED, text):
        found["max_running_requests"] = int(match.group(1))
    for key, pattern, kind in (
        ("context_len", _CONTEXT, int),
        ("chunked_prefill_size", _CHUNKED, int),
        ("mem_fraction_static", _FRACTION, float),
        ("tp_size", _TP, int),
    ):
        if match := _first(pattern, text):
            found[key] = kind(match.group(1))
    return found
