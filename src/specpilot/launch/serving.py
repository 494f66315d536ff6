"""After ready: the engine can still die (a worker process lost, the engine core failed).

`up` returns at ready and records where in the log serving began (`RunState.ready_log_bytes`).
From there the log is classified in serving mode: a request's own error and traceback
do not end the run, a line that ends serving does (vLLM's "Worker proc ... died
unexpectedly" / "EngineCore encountered a fatal error", SGLang's "Scheduler hit an
exception"), and so does the process being gone. The verdict is a `Crash` with the
cause decided over the whole error block, as at startup.

`check_serving` is one look (for `status`); `watch_serving` follows the log until the
run ends (for `generate --run`, so a job stops within a second of the fatal line
instead of waiting out request timeouts). Either records the crash in the run state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from specpilot.engines.registry import engine_by_name
from specpilot.hosts.base import Host
from specpilot.hosts.errors import HostError
from specpilot.launch.classify import LogClassifier
from specpilot.launch.identity import recorded_process
from specpilot.launch.state import CrashRecord, RunState, read_state, write_state
from specpilot.launch.tail import followed, next_chunk
from specpilot.secrets import mask_log_text

QUIET_S = 0.2  # after the fatal line: the error block ended when the log is quiet this long
GRACE_S = 0.5  # ... or this long after the fatal line, whichever comes first
PROCESS_EVERY_S = 1.0  # how often the watcher checks that the process still runs


@dataclass(frozen=True)
class Crash:
    """How a ready run ended."""

    cause: str
    signature: str | None
    error: str
    exit_status: int | None

    @property
    def first_line(self) -> str:
        """The error's first line as it is stored and shown: a secret it echoes masked."""
        return mask_log_text(next((line.strip() for line in self.error.splitlines() if line.strip()), ""))

    def record(self) -> CrashRecord:
        """What the run state keeps of it."""
        return CrashRecord(self.cause, self.signature, self.first_line, self.exit_status)


def _feed_text(classifier: LogClassifier, data: bytes) -> None:
    for raw in data.decode(errors="replace").splitlines():
        classifier.feed(raw.rstrip("\r"))


def serving_classifier(state: RunState) -> LogClassifier:
    """A classifier of a ready run's log: its engine looked up once, from the run's record."""
    return LogClassifier(engine_by_name(state.engine), serving=True)


async def _crash(host: Host, state: RunState, classifier: LogClassifier, *, exited: bool) -> Crash:
    exit_path = state.exit_path
    exit_status = await host.exit_status(exit_path) if exited and exit_path else None
    failure = classifier.failure(exited=exited, exit_code=exit_status)
    return Crash(failure.cause, failure.signature, failure.error, exit_status)


async def _since_ready(host: Host, state: RunState, offset: int) -> LogClassifier:
    """The run's log from where serving began, classified."""
    classifier = serving_classifier(state)
    with contextlib.suppress(FileNotFoundError):  # a deleted log: the process still decides
        _feed_text(classifier, await host.read_bytes(state.log_path, offset))
    return classifier


async def check_serving(host: Host, state: RunState) -> Crash | None:
    """One look at a ready run: a fatal line since ready, or its process gone."""
    offset = state.ready_log_bytes
    if state.phase != "ready" or offset is None:
        return None
    classifier = await _since_ready(host, state, offset)
    process = await recorded_process(host, state)
    if process == "unproven":  # the record names a process not provably the run's: no crash of it
        return None
    if classifier.fatal_seen or process != "running":
        return await _crash(host, state, classifier, exited=process != "running")
    return None


async def watch_serving(host: Host, state: RunState) -> Crash:
    """Follow a ready run's log until it ends serving; return how it did.

    A fatal line is decided within `GRACE_S` (collecting its error block meanwhile); a
    process that ends without one is noticed within `PROCESS_EVERY_S`."""
    log_path, offset = state.log_path, state.ready_log_bytes or 0
    classifier = serving_classifier(state)
    partial = b""
    fatal_at: float | None = None
    last_line_at = time.monotonic()
    next_process_check = last_line_at + PROCESS_EVERY_S
    async with followed(host, log_path, offset) as chunks:
        while True:
            now = time.monotonic()
            if fatal_at is None:
                deadline = next_process_check
            else:
                deadline = min(fatal_at + GRACE_S, last_line_at + QUIET_S)
            chunk = await next_chunk(chunks, deadline - now)
            if chunk is not None:
                *lines, partial = (partial + chunk).split(b"\n")
                for raw in lines:
                    classifier.feed(raw.decode(errors="replace").rstrip("\r"))
                last_line_at = time.monotonic() if lines else last_line_at
            now = time.monotonic()
            if classifier.fatal_seen and fatal_at is None:
                fatal_at = now
            if fatal_at is not None and (now >= fatal_at + GRACE_S or now >= last_line_at + QUIET_S):
                return await _crash(host, state, classifier, exited=False)
            if fatal_at is None and now >= next_process_check:
                if await recorded_process(host, state) != "running":
                    return await _crash(host, state, classifier, exited=True)
                next_process_check = time.monotonic() + PROCESS_EVERY_S


def record_crash(name: str, crash: Crash) -> RunState:
    """The run state says the run failed and why (unless it was stopped meanwhile)."""
    state = read_state(name)
    if state.phase == "ready":
        state = state.crashed(crash.record(), at_s=time.time())
        write_state(state)
    return state


async def fill_crash_exit(host: Host, name: str) -> RunState:
    """A crash recorded with no exit status (its engine was a zombie its watcher had not
    reaped yet, so no exit record) gets it once the watcher's record exists: the verdict
    is made again with it, as it would have been. Only while the run is still "failed":
    after `down` the process's end may be that stop's signal."""
    state = read_state(name)
    crash, offset = state.crash, state.ready_log_bytes
    if state.phase != "failed" or crash is None or crash.exit_status is not None:
        return state
    if offset is None or not state.exit_path or await host.exit_status(state.exit_path) is None:
        return state
    filled = await _crash(host, state, await _since_ready(host, state, offset), exited=True)
    state = replace(state, cause=filled.cause, crash=filled.record())
    write_state(state)
    return state


async def stop_on_crash(
    name: str,
    stop: Callable[[str], None],
    note: Callable[[str], None],
    open_host: Callable[[RunState], Host],
) -> None:
    """For a job driving run `name`: when the run ends serving, record it and `stop` the
    job with a reason that names the cause and what to do."""
    state = read_state(name)
    host = open_host(state)
    try:
        crash = await watch_serving(host, state)
    except (HostError, OSError) as err:
        # its host went away or the log is unreadable: the job can go on without the
        # watcher, and the user is told; any other error is a bug and ends the job
        note(f"stopped watching run {name}'s log: {err}")
        return
    finally:
        await host.close()
    record_crash(name, crash)
    stop(
        f"run {name} crashed ({crash.cause}): {crash.first_line}; see `specpilot status {name}`, "
        "start it again with `specpilot up`, then run the same command to resume"
    )
