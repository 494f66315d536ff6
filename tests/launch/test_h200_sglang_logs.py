"""`up`'s classifier over real SGLang startup logs from the H200 (gpu/sglang/run_matrix.sh).

Every start of the matrix (SGLang 0.5.13.post1 and 0.5.17, Qwen3.6-27B with and without MTP,
Qwen3-8B; tests/data/startup_logs/sglang-h200/, each log headed by its date, GPU, release
and flags) is fed line by line as `up` feeds a live log: a start that reached ready must be
ready with the phases and allocations read, one that died must be classified with its real
cause, never "crash" or "unknown", and carry a fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.engines.registry import engine_by_name
from specpilot.launch.classify import LogClassifier

DATA = Path(__file__).resolve().parents[1] / "data" / "startup_logs" / "sglang-h200"
LOGS = sorted(DATA.glob("*.log"))
READY = "The server is fired up and ready to roll"


def _classified(path: Path) -> LogClassifier:
    classifier = LogClassifier(engine_by_name("sglang"))
    for line in path.read_text().splitlines():
        classifier.feed(line)
    return classifier


def test_the_matrix_is_there() -> None:
    assert len(LOGS) >= 16


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_each_real_start_is_classified_with_its_cause(log: Path) -> None:
    classifier = _classified(log)
    text = log.read_text()
    if READY in text:
        assert classifier.ready_seen and not classifier.fatal_seen
        assert classifier.phase == "ready"
        assert classifier.allocations["kv_tokens"] > 0
        return
    failure = classifier.failure(exited=True)
    assert failure.cause == "oom", failure.error[:400]
    assert failure.fix is not None
    assert "--mem-fraction-static" in (failure.fix.text or "") + " ".join(failure.fix.args)


@pytest.mark.parametrize("log", [p for p in LOGS if READY in p.read_text()], ids=lambda p: p.stem)
def test_graph_capture_is_a_phase_in_both_log_formats(log: Path) -> None:
    """0.5.13 prints "Capture cuda graph begin", 0.5.17 "Capture target decode CUDA graph
    begin": `up` shows either as the capture phase (unless graphs are off)."""
    text = log.read_text()
    if "--disable-cuda-graph" in text.splitlines()[3]:
        pytest.skip("CUDA graphs off in this start")
    phases: list[str] = []
    classifier = LogClassifier(engine_by_name("sglang"))
    for line in text.splitlines():
        event = classifier.feed(line)
        if event.name:
            phases.append(event.name)
    assert "cuda_graph_capture" in phases and "graphs_captured" in phases
