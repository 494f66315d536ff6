"""Every fatal signature against a log users published (tests/data/engine_logs, the
issue's URL on each file's first line), as printed and inside the prefixes that
container runtimes, Ray and rank tags put in front of engine lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.engines.registry import engine_by_name
from specpilot.engines.signatures import Kind
from specpilot.launch.classify import ALL, LogClassifier

DATA = Path(__file__).resolve().parents[1] / "data" / "engine_logs"
SOURCE = "# source: "

#: file -> (engine, cause, signature, fix args)
PUBLISHED = {
    "vllm-engine-dead-after-ready.log": ("vllm", "crash", "engine_dead", ()),
    "vllm-unrecognized-arguments.log": ("vllm", "bad_args", "unrecognized_arguments", ()),
    "sglang-unrecognized-arguments.log": ("sglang", "bad_args", "unrecognized_arguments", ()),
    "sglang-invalid-argument.log": ("sglang", "bad_args", "invalid_argument", ()),
    "vllm-cuda-oom.log": ("vllm", "oom", "cuda_oom", ()),
    "sglang-nccl.log": ("sglang", "nccl", "nccl", ()),
    "vllm-address-in-use.log": ("vllm", "port_in_use", "address_in_use", ()),
    "vllm-import-error.log": ("vllm", "import_error", "import_error", ()),
    "vllm-argument-validation.log": ("vllm", "config", "argument_validation", ()),
    "sglang-exception.log": ("sglang", "crash", "exception", ()),
    "sglang-child-died.log": ("sglang", "crash", "child_died", ()),
    "sglang-scheduler-exception.log": ("sglang", "crash", "scheduler_exception", ()),
    "vllm-engine-core-failed.log": ("vllm", "crash", "engine_core_failed", ()),
    "sglang-cuda-graph-oom.log": ("sglang", "oom", "cuda_graph_oom", ()),
    "sglang-kv-pool-empty.log": ("sglang", "oom", "kv_pool_empty", ()),
    "vllm-max-model-len-does-not-fit.log": (
        "vllm",
        "oom",
        "max_model_len_does_not_fit",
        ("--max-model-len", "34736"),
    ),
    "vllm-max-model-len-above-model.log": (
        "vllm",
        "config",
        "max_model_len_above_model",
        ("--max-model-len", "512"),
    ),
    "vllm-no-cache-blocks.log": ("vllm", "oom", "no_cache_blocks", ()),
    "sglang-spec-radix-no-buffer.log": (
        "sglang",
        "config",
        "spec_radix_no_buffer",
        ("--mamba-scheduler-strategy", "extra_buffer"),
    ),
}
#: signatures whose line no public issue found so far shows (their stand-in scenario covers them)
NOT_FOUND_PUBLISHED = {"package_metadata"}
#: signatures first seen in our own recordings of a real engine (whole logs with their date, GPU,
#: release and flags in tests/data/startup_logs/sglang-h200/): the log that shows each
OWN_RECORDINGS = {
    "draft_worker_oom": "r13-mtp-092-96.log",  # the incident's 0.92 on 0.5.13.post1
    "prefill_graph_oom": "r17-plain-rec-96.log",
    "weights_leave_no_kv": "r17-mtp-explicit-80.log",
}
H200_LOGS = Path(__file__).resolve().parents[1] / "data" / "startup_logs" / "sglang-h200"

PREFIXES = {
    "as printed": "",
    "docker compose": "sglang-1  | ",
    "docker compose, coloured": "\x1b[36mvllm-1  |\x1b[0m ",
    "ray worker": "(RayWorkerWrapper pid=2304) ",
    "vllm v1 nested": "(EngineCore_DP0 pid=33630) (VllmWorker TP0 pid=33641) ",
    "torch rank": "[rank0]: ",
    "sglang rank tag": "[2025-02-26 12:01:56 TP0] ",
    "compose around ray": "vllm-1  | (RayWorkerWrapper pid=2304) ",
}


def published_lines(name: str) -> tuple[str, list[str]]:
    source, *lines = (DATA / name).read_text().splitlines()
    assert source.startswith(SOURCE + "https://github.com/"), f"{name} must cite its public source URL"
    return source[len(SOURCE) :], lines


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_failure_classifies_the_same_whatever_the_prefix(name: str, prefix: str) -> None:
    engine, cause, signature, fix_args = PUBLISHED[name]
    _, lines = published_lines(name)
    classifier = LogClassifier(engine_by_name(engine))
    for line in lines:
        classifier.feed(PREFIXES[prefix] + line)
    failure = classifier.failure(exited=True)
    assert (failure.cause, failure.signature) == (cause, signature)
    if fix_args:
        assert failure.fix is not None and failure.fix.args == fix_args
    assert lines[-1] in failure.error  # the user sees the engine's own last error line


def test_every_fatal_signature_has_a_published_log_with_its_url() -> None:
    covered = {signature for _, _, signature, _ in PUBLISHED.values()}
    fatal = {sig.name for sig in ALL if sig.kind is Kind.FATAL}
    assert fatal - covered == NOT_FOUND_PUBLISHED | set(OWN_RECORDINGS)
    assert {path.name for path in DATA.glob("*.log")} == set(PUBLISHED)
    for sig in ALL:
        if sig.kind is Kind.FATAL and sig.name in covered:
            assert sig.source is not None and sig.source.startswith("https://"), sig.name


@pytest.mark.parametrize(("signature", "log"), sorted(OWN_RECORDINGS.items()))
def test_signatures_from_our_own_recordings_classify_their_log(signature: str, log: str) -> None:
    classifier = LogClassifier(engine_by_name("sglang"))
    for line in (H200_LOGS / log).read_text().splitlines():
        classifier.feed(line)
    assert classifier.failure(exited=True).signature == signature


def test_a_crash_after_ready_ends_serving_but_a_failed_request_does_not() -> None:
    """After ready only a line that ends serving is fatal; a request's own traceback is not."""
    _, lines = published_lines("vllm-engine-dead-after-ready.log")
    serving = LogClassifier(engine_by_name("vllm"), serving=True)
    request_error = [
        "ERROR 11-08 11:00:01 [serving_chat.py:200] Error in preprocessing prompt inputs",
        "Traceback (most recent call last):",
        "ValueError: This model's maximum context length is 4096 tokens.",
    ]
    for line in request_error:
        serving.feed(line)
    assert not serving.fatal_seen
    for line in lines:
        serving.feed(line)
    assert serving.fatal_seen
    failure = serving.failure(exited=False)
    assert failure.cause == "crash"
    assert "Worker proc VllmWorker-3 died unexpectedly" in failure.error.splitlines()[0]
