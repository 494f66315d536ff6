"""The quantities an SGLang startup log prints (0.5.10-0.5.23 print the same lines).

Shortened, in the order a speculative start prints them ("GB" means GiB):

    Load weight begin. avail mem=94.93 GB
    Load weight end. ... type=Qwen3_5ForConditionalGeneration, avail mem=43.88 GB, mem usage=51.05 GB.
    Load weight begin. avail mem=43.84 GB
    Load weight end. ... type=Qwen3_5ForCausalLMMTP, avail mem=38.31 GB, mem usage=5.53 GB.
    Mamba Cache is allocated. max_mamba_cache_size: 115, conv_state size: 0.32GB, ...
    KV Cache is allocated. dtype: torch.bfloat16, #tokens: 36256, K size: 1.11 GB, ...
    KV Cache is allocated. dtype: torch.bfloat16, #tokens: 36256, K size: 0.07 GB, ...
    max_total_num_tokens=36256, chunked_prefill_size=8192, ..., max_running_requests=23, ...

The target's weight and KV lines are each rank's first; the draft's are its second.
"""

from __future__ import annotations

import re

from specpilot.engines.loglines import LogQuantity, Pick, Unit

_TREE = "https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt"
_LOAD_BEGIN = f"{_TREE}/model_executor/model_runner.py#L1274"
_LOAD_END = f"{_TREE}/model_executor/model_runner.py#L1373"
_KV_POOL = f"{_TREE}/mem_cache/memory_pool.py#L2088"
_MAMBA_POOL = f"{_TREE}/mem_cache/memory_pool.py#L984"
_SCHEDULER = f"{_TREE}/managers/scheduler.py#L1269"
_CAPPED = f"{_TREE}/mem_cache/kv_cache_configurator.py#L3141"
_SERVER_ARGS = f"{_TREE}/entrypoints/engine.py#L311"

_NUMBER = r"(?P<value>\d+(?:\.\d+)?)"
_LOAD_END_LINE = r"Load weight end\..*?"
_KV_LINE = re.compile(r"KV Cache is allocated\..*?#tokens: (?P<value>\d+)")
_K_SIZE_LINE = re.compile(
    r"KV Cache is allocated\. dtype: torch\.(?P<dtype>\w+), #tokens: \d+, K size: (?P<value>[0-9.]+) ?GB"
)
_WEIGHTS_LINE = re.compile(rf"{_LOAD_END_LINE}mem usage={_NUMBER} ?GB")

QUANTITIES: tuple[LogQuantity, ...] = (
    LogQuantity(
        "version",
        re.compile(
            r"\bsglang(?:[ _-]?version)?\s*(?:==|=|:|\s)\s*v?(?P<value>\d+\.\d+\.\d+(?:\.post\d+)?)",
            re.IGNORECASE,
        ),
        Unit.TEXT,
        # SGLang prints no release line; the header of a saved log says it
        # ("sglang 0.5.17", "sglang==0.5.17", an image tag "sglang-rocm:v0.5.17")
        "https://pypi.org/project/sglang/",
    ),
    LogQuantity("architecture", re.compile(rf"{_LOAD_END_LINE}type=(?P<value>\w+)"), Unit.TEXT, _LOAD_END),
    LogQuantity(
        "free_before_load_gib",
        re.compile(rf"Load weight begin\..*?avail mem={_NUMBER} ?GB"),
        Unit.GIB,
        _LOAD_BEGIN,
    ),
    # what the target's weights left: with them, free memory when no begin line was kept
    LogQuantity(
        "free_after_load_gib", re.compile(rf"{_LOAD_END_LINE}avail mem={_NUMBER} ?GB"), Unit.GIB, _LOAD_END
    ),
    LogQuantity("weights_gib", _WEIGHTS_LINE, Unit.GIB, _LOAD_END),
    LogQuantity("draft_weights_gib", _WEIGHTS_LINE, Unit.GIB, _LOAD_END, pick=Pick.SECOND),
    LogQuantity("kv_tokens", _KV_LINE, Unit.TOKENS, _KV_POOL),
    # the target's K pool: with its tokens, the K bytes per token that identify the model
    LogQuantity("kv_dtype", _K_SIZE_LINE, Unit.TEXT, _KV_POOL, group="dtype"),
    LogQuantity("k_cache_gib", _K_SIZE_LINE, Unit.GIB, _KV_POOL),
    # the scheduler repeats the target's pool size (a log kept without the pool line)
    LogQuantity("kv_tokens", re.compile(r"max_total_num_tokens=(?P<value>\d+)"), Unit.TOKENS, _SCHEDULER),
    # the second pool line is the draft's only when a draft loaded (sliding-window models
    # print two pools of their own): `draft_kv_tokens` is read with `draft_weights_gib`
    LogQuantity("draft_kv_tokens", _KV_LINE, Unit.TOKENS, _KV_POOL, pick=Pick.SECOND),
    LogQuantity(
        "max_mamba_cache_size",
        re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<value>\d+)"),
        Unit.COUNT,
        _MAMBA_POOL,
    ),
    LogQuantity(
        "max_running_requests",
        re.compile(r"max_total_num_tokens=\d+.*?max_running_requests=(?P<value>\d+)"),
        Unit.COUNT,
        _SCHEDULER,
    ),
    LogQuantity(
        "max_running_requests",
        re.compile(r"max_running_requests is capped to (?P<value>\d+) by the mamba state cache"),
        Unit.COUNT,
        _CAPPED,
    ),
    LogQuantity("context_len", re.compile(r"context_len=(?P<value>\d+)"), Unit.TOKENS, _SCHEDULER),
    LogQuantity(
        "chunked_prefill_size", re.compile(r"chunked_prefill_size=(?P<value>-?\d+)"), Unit.TOKENS, _SCHEDULER
    ),
    LogQuantity(
        "mem_fraction_static", re.compile(rf"mem_fraction_static={_NUMBER}"), Unit.FRACTION, _SERVER_ARGS
    ),
    LogQuantity("tp_size", re.compile(r"\btp_size=(?P<value>\d+)"), Unit.COUNT, _SERVER_ARGS),
)

#: lines only SGLang prints (a log of another engine has none)
MARKERS: tuple[re.Pattern[str], ...] = (
    re.compile(r"Load weight (?:begin|end)\."),
    re.compile(r"KV Cache is allocated\."),
    re.compile(r"max_total_num_tokens=\d+"),
    re.compile(r"server_args=ServerArgs\("),
)
#: lines printed once the weights are loaded (the end-of-load line or a later stage)
LOADED: tuple[re.Pattern[str], ...] = (
    re.compile(r"Load weight end\."),
    re.compile(r"KV Cache is allocated\."),
    re.compile(r"Mamba Cache is allocated\."),
    re.compile(r"max_total_num_tokens=\d+"),
    re.compile(r"max_running_requests is capped to \d+"),
)
#: the end-of-load line as a user finds it in the log
LOADED_LINE = "Load weight end."
