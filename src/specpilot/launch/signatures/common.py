"""Failure lines both engines share: Python, PyTorch, NCCL, argparse, uvicorn.

Tried after the engine-specific ones, most specific first; the last ones
(a plain traceback, a child that died) only say "crash".
"""

from __future__ import annotations

from specpilot.launch.signatures.base import Kind, Signature, SignatureFix

_ANY = "*"

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        _ANY,
        Kind.FATAL,
        "unrecognized_arguments",
        r"error: unrecognized arguments: (?P<flags>.+)",
        cause="bad_args",
        fix=SignatureFix("remove or rename {flags}: this engine version does not know them"),
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "invalid_argument",
        r"error: argument (?P<flag>--?[\w-]+)(?:/[\w-]+)*: (?P<why>.+)",
        cause="bad_args",
        fix=SignatureFix("fix the value of {flag}: {why}"),
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation",
        cause="oom",
        fix=SignatureFix("lower the memory fraction or the batch/context limits; run `specpilot plan`"),
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
        source="https://github.com/sgl-project/sglang/issues/4289",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "address_in_use",
        r"[Aa]ddress already in use|\[Errno 98\]",
        cause="port_in_use",
        fix=SignatureFix("another process took the port: stop it or choose another [server] port"),
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "import_error",
        r"\b(?:ModuleNotFoundError|ImportError)\b(?::|$)",
        cause="import_error",
        fix=SignatureFix("the engine's Python environment is incomplete: install the missing module"),
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "argument_validation",
        r"\b(?:ValueError|AssertionError|NotImplementedError|ValidationError)\b(?::|$)",
        cause="config",
    ),
    Signature(
        _ANY,
        Kind.FATAL,
        "exception",
        r"^(?:.*[\s\]:])?(?:[A-Za-z_][\w.]*\.)?(?:[A-Z]\w*)?(?:Error|Exception)(?::\s|:?$)",
        cause="crash",
    ),
    Signature(_ANY, Kind.FATAL, "child_died", r"Received sigquit from a child process", cause="crash"),
    Signature(_ANY, Kind.FATAL, "engine_core_failed", r"Engine core initialization failed", cause="crash"),
)
