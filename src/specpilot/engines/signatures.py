"""What one log signature is: a declarative pattern over one engine log line.

Engine knowledge is data: each ready line, progress phase and fatal error is one
`Signature`, and `launch/classify.py` only iterates over them. The failure lines both
engines share (Python, PyTorch, NCCL, argparse) are here too (`SHARED`); each engine's
own are in `engines/<engine>/signatures.py`. The numbers a log prints are not
signatures: they are declared once in `engines/<engine>/loglines.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    """What a matching line tells the supervisor."""

    READY = "ready"  # the engine says it serves
    PROGRESS = "progress"  # a startup phase began (weights, KV pool, graphs)
    FATAL = "fatal"  # the engine failed; `cause` classifies it
    # a line printed a number `up` compares with the plan: an event only, the lines are
    # log quantities (engines/<engine>/loglines.py), read the same way by calibration
    ALLOCATION = "allocation"


#: cause classes of `specpilot up --json`
CAUSES = (
    "ready",
    "oom",
    "config",
    "bad_args",
    "port_in_use",
    "crash",
    "hang",
    "import_error",
    "nccl",
    "mismatch",
    "timeout",
    "unknown",
)


@dataclass(frozen=True)
class SignatureFix:
    """What to change when a signature matched: prose plus concrete args/env."""

    text: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Signature:
    """One pattern over one log line.

    `engine` is "sglang", "vllm" or "*" (both). `name` is the phase (progress) or a
    short id (fatal). Fatal signatures are tried in
    list order over the whole collected error text, so specific ones come first.
    """

    engine: str
    kind: Kind
    name: str
    pattern: str
    cause: str | None = None
    fix: SignatureFix | None = None
    source: str | None = None  # where the line was seen (public issue URL)
    #: the server can no longer serve (not one request failing): after ready, only such
    #: a line ends the run; the cause is still decided over its whole error block
    ends_serving: bool = False

    def __post_init__(self) -> None:
        if self.kind is Kind.FATAL and self.cause not in CAUSES:
            raise ValueError(f"signature {self.name}: unknown cause {self.cause!r}")
        if self.kind is Kind.ALLOCATION:
            raise ValueError(f"signature {self.name}: a printed number is a LogQuantity, not a signature")

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern)

    def applies_to(self, engine: str) -> bool:
        return self.engine in ("*", engine)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _CACHE.get(pattern)
    if compiled is None:
        compiled = _CACHE[pattern] = re.compile(pattern, re.MULTILINE)  # ^ and $ per line
    return compiled


# Failure lines both engines share: Python, PyTorch, NCCL, argparse, uvicorn. Tried after
# the engine-specific ones, most specific first; the last ones (a plain traceback, a child
# that died) only say "crash".

_ANY = "*"

SHARED: tuple[Signature, ...] = (
    Signature(
        _ANY,
        Kind.FATAL,
        "unrecognized_arguments",
        r"error: unrecognized arguments: (?P<flags>.+)",
        cause="bad_args",
        fix=SignatureFix("remove or rename {flags}: this engine version does not know them"),
        source="https://github.com/vllm-project/vllm-omni/issues/1364",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "invalid_argument",
        r"error: argument (?P<flag>--?[\w-]+)(?:/[\w-]+)*: (?P<why>.+)",
        cause="bad_args",
        fix=SignatureFix("fix the value of {flag}: {why}"),
        source="https://github.com/intel/llm-scaler/issues/403",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation",
        cause="oom",
        fix=SignatureFix("lower the memory fraction or the batch/context limits; run `specpilot plan`"),
        source="https://github.com/vllm-project/vllm/issues/8073",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "nccl",
        r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|DistBackendError",
        cause="nccl",
        fix=SignatureFix(
            "NCCL failed between GPUs: rerun with NCCL_DEBUG=INFO to see why; check that no other "
            "process holds the GPUs and that --tp matches the visible GPUs",
            env={"NCCL_DEBUG": "INFO"},
        ),
        source="https://github.com/sgl-project/sglang/issues/8974",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "address_in_use",
        r"[Aa]ddress already in use|\[Errno 98\]",
        cause="port_in_use",
        fix=SignatureFix("another process took the port: stop it or choose another [server] port"),
        source="https://github.com/vllm-project/vllm/issues/7514",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "import_error",
        r"\b(?:ModuleNotFoundError|ImportError)\b(?::|$)",
        cause="import_error",
        fix=SignatureFix("the engine's Python environment is incomplete: install the missing module"),
        source="https://github.com/vllm-project/vllm/issues/22072",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "argument_validation",
        r"\b(?:ValueError|AssertionError|NotImplementedError|ValidationError)\b(?::|$)",
        cause="config",
        source="https://github.com/vllm-project/vllm/issues/13150",
    ),
    # the engine's own "a process of mine died" lines: before the bare exception, so they
    # name a crash; after every specific cause, so an OOM inside the block stays an OOM
    Signature(
        _ANY,
        Kind.FATAL,
        "child_died",
        r"Received sigquit from a child proces",  # "proces" in SGLang 0.4.x
        cause="crash",
        source="https://github.com/sgl-project/sglang/issues/3460",
        ends_serving=True,
    ),
    Signature(
        "sglang",
        Kind.FATAL,
        "scheduler_exception",
        r"Scheduler hit an exception",
        cause="crash",
        source="https://github.com/sgl-project/sglang/issues/3889",
        ends_serving=True,
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "engine_core_failed",
        r"Engine core initialization failed",
        cause="crash",
        source="https://github.com/vllm-project/vllm/issues/23176",
    ),
    Signature(
        "vllm",
        Kind.FATAL,
        "engine_dead",
        r"Worker proc \S+ died unexpectedly|EngineCore encountered a fatal error|"
        r"Engine core proc \S+ died unexpectedly|EngineDeadError|MQLLMEngine is already dead",
        cause="crash",
        fix=SignatureFix(
            "the engine died while serving: its error above names the cause; restart it with "
            "`specpilot up` (requests in flight were lost; `generate` resumes them)"
        ),
        source="https://github.com/intel/llm-scaler/issues/154",
        ends_serving=True,
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "exception",
        r"^(?:.*[\s\]:])?(?:[A-Za-z_][\w.]*\.)?(?:[A-Z]\w*)?(?:Error|Exception)(?::\s|:?$)",
        cause="crash",
        source="https://github.com/sgl-project/sglang/issues/4205",
    ),
)
