"""The classifier over recorded/scripted engine logs: every scenario gets its cause."""

from __future__ import annotations

import pytest

from specpilot.engines.registry import engine_by_name
from specpilot.engines.signatures import Kind
from specpilot.launch.classify import ALL, LogClassifier
from tests.fakeengines.scenarios import SCENARIOS, Scenario


def render(scenario: Scenario) -> list[str]:
    values = {"{ts}": "2026-11-29 10:00:00", "{host}": "127.0.0.1", "{port}": "30000"}
    values |= {"{pid}": "4242", "{model}": "/models/qwen"}
    lines = []
    for step in scenario.steps:
        text = step.text
        for key, value in values.items():
            text = text.replace(key, value)
        lines.append(text)
    return lines


def classify(scenario: Scenario) -> LogClassifier:
    classifier = LogClassifier(engine_by_name(scenario.engine))
    for line in render(scenario):
        classifier.feed(line)
    return classifier


FAILING = sorted(name for name, s in SCENARIOS.items() if s.expected_signature)


@pytest.mark.parametrize("name", FAILING)
def test_each_failure_gets_its_cause_signature_and_whole_error(name: str) -> None:
    scenario = SCENARIOS[name]
    classifier = classify(scenario)
    failure = classifier.failure(exited=True)
    assert (failure.cause, failure.signature) == (
        scenario.expected_cause,
        scenario.expected_signature,
    )
    fatal_text = next(step.text for step in scenario.steps if step.fatal)
    first_tb = next((line for line in render(scenario) if "Traceback" in line), None)
    assert fatal_text.split("{")[0][:60] in failure.error
    if first_tb is not None:  # the whole traceback, from its first line (after one line of context)
        assert first_tb in failure.error.splitlines()[:2]


def test_fatal_line_is_the_exception_line_not_the_frames() -> None:
    scenario = SCENARIOS["sglang_incident_valueerror"]
    classifier = LogClassifier(engine_by_name("sglang"))
    for index, line in enumerate(render(scenario)):
        classifier.feed(line)
        if index < len(scenario.steps) - 1:
            assert not classifier.fatal_seen, line
    assert classifier.fatal_seen


def test_incident_fix_is_a_flag_and_an_env_var() -> None:
    failure = classify(SCENARIOS["sglang_incident_valueerror"]).failure(exited=True)
    assert failure.fix is not None
    assert failure.fix.args == ("--mamba-scheduler-strategy", "extra_buffer")
    assert failure.fix.env == {"SGLANG_ENABLE_SPEC_V2": "1"}


def test_fix_placeholders_are_filled_from_the_log() -> None:
    failure = classify(SCENARIOS["vllm_kv_does_not_fit"]).failure(exited=True)
    assert failure.fix is not None
    assert failure.fix.args == ("--max-model-len", "15984")


def test_oom_inside_engine_core_failure_is_oom_not_crash() -> None:
    lines = [
        "ERROR [core.py:1] EngineCore failed to start.",
        "ERROR [core.py:1] Traceback (most recent call last):",
        'ERROR [core.py:1]   File "x.py", line 1, in f',
        "ERROR [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB.",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    classifier = LogClassifier(engine_by_name("vllm"))
    for line in lines:
        classifier.feed(line)
    assert classifier.failure(exited=True).cause == "oom"


def test_ready_scenario_reaches_ready_with_phases_and_allocations() -> None:
    classifier = LogClassifier(engine_by_name("sglang"))
    phases = []
    for line in render(SCENARIOS["sglang_ready"]):
        event = classifier.feed(line)
        if event.kind is Kind.PROGRESS:
            phases.append(event.name)
    assert classifier.ready_seen and not classifier.fatal_seen
    assert phases.index("loading_weights") < phases.index("cuda_graph_capture")
    assert classifier.allocations == {
        "weights_gib": 50.66,
        "state_slots": 96,
        "kv_tokens": 295950,
        "max_running_requests": 48,
    }


def test_sglang_uvicorn_startup_line_is_not_sglang_ready() -> None:
    classifier = LogClassifier(engine_by_name("sglang"))
    classifier.feed("[2026-11-29 10:00:00] INFO:     Application startup complete.")
    assert not classifier.ready_seen
    vllm = LogClassifier(engine_by_name("vllm"))
    vllm.feed("(APIServer pid=1) INFO:     Application startup complete.")
    assert vllm.ready_seen


def test_warning_that_names_an_error_type_is_not_fatal() -> None:
    classifier = LogClassifier(engine_by_name("vllm"))
    classifier.feed("WARNING 11-29 10:00:00 [utils.py:1] ImportError: triton not found, using eager")
    assert not classifier.fatal_seen


def test_exit_without_error_line_is_a_crash_with_the_log_tail() -> None:
    classifier = LogClassifier(engine_by_name("sglang"))
    for line in ("[ts TP0] Load weight begin. avail mem=93.77 GB", "Killed"):
        classifier.feed(line)
    failure = classifier.failure(exited=True)
    assert failure.cause == "crash"
    assert "Killed" in failure.error


def test_a_handled_traceback_before_progress_is_not_part_of_a_later_error() -> None:
    classifier = LogClassifier(engine_by_name("sglang"))
    classifier.feed("Traceback (most recent call last):")
    classifier.feed("  handled somewhere")
    classifier.feed("[ts TP0] Load weight begin. avail mem=93.77 GB")
    classifier.feed("RuntimeError: NCCL error: unhandled system error")
    failure = classifier.failure(exited=True)
    assert failure.cause == "nccl"
    assert "handled somewhere" not in failure.error


def test_every_fatal_signature_has_a_cause_and_compiles() -> None:
    for sig in ALL:
        assert sig.regex.pattern
        if sig.kind is Kind.FATAL:
            assert sig.cause
