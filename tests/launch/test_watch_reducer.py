"""The readiness decision as a pure reducer: event sequences at explicit times, no host,
no clock, no sleeps. Times are seconds; the watch begins at 0 (the launch, too). The
periods and times are sums of powers of two, so deadlines compare exactly."""

from __future__ import annotations

import itertools

import pytest

from specpilot.engines.registry import engine_by_name
from specpilot.launch.classify import LogClassifier
from specpilot.launch.health import HealthAnswer
from specpilot.launch.readiness import (
    Broken,
    Event,
    Exit,
    Exited,
    Failed,
    Health,
    Hung,
    Line,
    Mismatched,
    Outcome,
    Ready,
    Tick,
    TimedOut,
    Timing,
    Verified,
    WatcherError,
    WatchState,
    step,
)
from specpilot.launch.verify import Mismatch

TIMING = Timing(grace_s=0.5, quiet_s=0.25, hang_timeout_s=10.0, ready_timeout_s=100.0)
OK = Health(HealthAnswer("/health", 200))
UNAVAILABLE = Health(HealthAnswer("/health", 503))
MISMATCH = Mismatch("argv", "-  --mem-fraction-static\n+  --mem-fraction-static 0.9")
READY_LINE = Line(ready_seen=True)
FATAL_LINE = Line(fatal_seen=True)

#: SGLang's CUDA graph OOM as https://github.com/sgl-project/sglang/issues/5285 shows it
GRAPH_OOM_BLOCK = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.",
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
)


def start() -> WatchState:
    return WatchState(TIMING, started_s=0.0, last_line_s=0.0)


def run(state: WatchState, *timed: tuple[float, Event]) -> WatchState:
    """Step through events that must not end the start; the state after the last."""
    for now, event in timed:
        after = step(state, event, now)
        assert isinstance(after, WatchState), f"{event} at {now} s ended the start: {after}"
        state = after
    return state


def ends(state: WatchState, event: Event, now: float) -> Outcome:
    after = step(state, event, now)
    assert not isinstance(after, WatchState), f"{event} at {now} s did not end the start"
    return after


def logged(classifier: LogClassifier, text: str) -> Line:
    """A line as the shell turns it into an event: classified first."""
    classifier.feed(text)
    return Line.after(classifier)


def test_a_fatal_block_is_collected_until_the_grace_ends_then_fails_with_all_of_it() -> None:
    classifier = LogClassifier(engine_by_name("sglang"))
    # each line within quiet_s of the one before: the block goes on until the grace ends
    times = (1.0, 1.125, 1.25, 1.375)
    state = start()
    for now, text in zip(times, GRAPH_OOM_BLOCK, strict=True):
        state = run(state, (now, logged(classifier, text)))
    assert state.fatal_s == 1.0
    assert state.due_s == 1.5  # the shell's next wake-up: the grace's end
    state = run(state, (1.49, Tick()))
    assert ends(state, Tick(), 1.5) == Failed()
    failure = classifier.failure(exited=False)
    assert (failure.cause, failure.signature) == ("oom", "cuda_graph_oom")
    assert failure.error == "\n".join(GRAPH_OOM_BLOCK)


def test_a_quiet_log_ends_the_fatal_block_before_the_grace() -> None:
    state = run(start(), (1.0, FATAL_LINE), (1.125, FATAL_LINE))
    assert state.due_s == 1.375  # quiet since 1.125, sooner than the grace (1.5)
    state = run(state, (1.37, Tick()))
    assert ends(state, Tick(), 1.375) == Failed()


def test_the_grace_ends_a_block_that_never_goes_quiet() -> None:
    state = run(start(), *((1.0 + 0.125 * i, FATAL_LINE) for i in range(4)))  # 1.0 .. 1.375
    assert ends(state, FATAL_LINE, 1.5) == Failed()


def test_an_exit_without_a_fatal_line_waits_for_the_last_lines_then_is_a_crash() -> None:
    classifier = LogClassifier(engine_by_name("sglang"))
    state = run(start(), (1.0, logged(classifier, "[2026-11-29 10:00:00] Load weight begin.")))
    state = run(state, (2.0, Exit()), (2.125, logged(classifier, "Killed")), (2.37, Tick()))
    assert ends(state, Tick(), 2.375) == Exited()
    failure = classifier.failure(exited=True, exit_code=-9)
    assert (failure.cause, failure.signature) == ("crash", None)
    assert "was killed by SIGKILL" in failure.error and failure.error.endswith("Killed")


def test_an_exit_waits_for_its_last_lines_at_most_the_grace() -> None:
    state = run(start(), (2.0, Exit()), *((2.0 + 0.125 * i, Line()) for i in range(1, 4)))  # .. 2.375
    assert state.due_s == 2.5
    assert ends(state, Tick(), 2.5) == Exited()


def test_the_exit_takes_over_a_fatal_block_and_its_last_lines_decide() -> None:
    state = run(start(), (1.0, FATAL_LINE), (1.125, Exit()))
    state = run(state, (1.3, Tick()))  # the fatal block alone would have failed at 1.25
    assert ends(state, Tick(), 1.375) == Exited()  # quiet since the exit


def test_after_the_exit_only_lines_count() -> None:
    state = run(
        start(),
        (1.0, Exit()),
        (1.03, Verified(MISMATCH)),  # an exiting process's argv reads differently: not a mismatch
        (1.06, WatcherError(ConnectionError("health probe"))),
        (1.09, OK),
        (1.125, FATAL_LINE),
        (1.37, Tick()),
    )
    assert state.fatal_s is None  # a fatal line after the exit starts no stop: the group is gone
    assert ends(state, Tick(), 1.375) == Exited()  # quiet since the last line


def test_an_exit_just_before_the_ready_timeout_still_gets_its_last_lines() -> None:
    state = run(start(), (9.875, Line()), (99.875, Exit()), (100.0, Tick()))  # no timeout, no hang
    assert state.due_s == 100.125
    assert ends(state, Tick(), 100.125) == Exited()


def test_health_ready_before_verification_waits_for_the_proof() -> None:
    state = run(start(), (1.0, READY_LINE), (1.1, OK), (60.0, Tick()))  # no hang once ready
    assert not state.needs_proof
    state = run(state, (61.0, Verified(None)))
    assert state.needs_proof  # the shell proves the process once more, at this moment
    assert ends(state, Verified(None), 61.01) == Ready()


def test_a_mismatch_at_the_last_proof_is_a_mismatch() -> None:
    state = run(start(), (1.0, Verified(None)), (1.1, READY_LINE), (1.2, OK))
    assert state.needs_proof
    assert ends(state, Verified(MISMATCH), 1.21) == Mismatched(MISMATCH)


@pytest.mark.parametrize("order", list(itertools.permutations([READY_LINE, OK, Verified(None)])))
def test_ready_needs_the_log_the_endpoint_and_a_proof_in_any_order(order: tuple[Event, ...]) -> None:
    state = start()
    for index, event in enumerate(order):
        assert not state.needs_proof
        state = run(state, (1.0 + index, event))
    assert state.needs_proof


def test_an_endpoint_that_stops_answering_withdraws_its_ready() -> None:
    state = run(start(), (1.0, READY_LINE), (1.1, Verified(None)), (1.2, UNAVAILABLE))
    assert not state.needs_proof
    state = run(state, (1.3, OK), (1.4, UNAVAILABLE))
    assert not state.needs_proof


def test_a_mismatch_while_starting_is_a_mismatch() -> None:
    assert ends(run(start(), (1.0, Line())), Verified(MISMATCH), 2.0) == Mismatched(MISMATCH)


def test_a_fatal_line_after_health_ready_but_before_verified_fails() -> None:
    state = run(start(), (1.0, READY_LINE), (1.125, OK), (1.25, Line(ready_seen=True, fatal_seen=True)))
    state = run(state, (1.3, Verified(None)), (1.375, Verified(MISMATCH)))
    assert not state.needs_proof  # the group is being stopped: no ready, no mismatch
    assert ends(state, Tick(), 1.5) == Failed()  # quiet since the fatal line


def test_a_fatal_line_after_a_first_proof_leaves_nothing_to_prove() -> None:
    state = run(start(), (1.0, Verified(None)), (1.0625, READY_LINE))
    state = run(state, (1.125, Line(ready_seen=True, fatal_seen=True)), (1.25, OK))
    assert not state.needs_proof  # the group is being stopped: not ready, whatever /health says
    state = run(state, (1.3, Verified(None)))
    assert ends(state, Tick(), 1.375) == Failed()


def test_no_line_before_ready_is_a_hang_counted_from_the_last_line() -> None:
    state = run(start(), (3.0, Line()), (12.99, Tick()))
    assert state.due_s == 13.0
    assert ends(state, Tick(), 13.0) == Hung(quiet_s=10.0)
    ready = run(start(), (3.0, READY_LINE), (13.0, Tick()))  # waiting for /health is no hang
    assert ready.due_s == 100.0


def test_not_ready_by_the_ready_timeout_counts_from_the_launch() -> None:
    launched = WatchState(TIMING, started_s=0.0, last_line_s=4.0)  # shipping took 4 s
    state = run(launched, *((float(t), Line()) for t in range(5, 100, 5)))
    assert ends(state, Tick(), 100.0) == TimedOut(elapsed_s=100.0)


def test_a_watcher_error_while_running_breaks_the_start() -> None:
    lost = ConnectionError("follow engine.log: connection lost")
    outcome = ends(run(start(), (1.0, FATAL_LINE)), WatcherError(lost), 1.1)
    assert isinstance(outcome, Broken) and outcome.error is lost


def test_ready_at_the_ready_timeout_is_proven_not_timed_out() -> None:
    state = run(start(), (90.0, READY_LINE), (95.0, OK))
    state = run(state, (100.0, Verified(None)))  # the timeout is due, but ready came first
    assert state.needs_proof
    assert ends(state, Verified(None), 100.0) == Ready()
