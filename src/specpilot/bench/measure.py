"""One variant, measured: `up`, a warm-up, the sample through `generate`'s job code, `down`.

The server is started by `launch` exactly as `specpilot up` starts it (ship, verify argv
and env, classify the log, ready or a classified failure with nothing left running). The
warm-up and the sample are `generate` jobs of their own in the variant's scratch folder,
never the user's job; the sample's requests stream (`bench.client`) so every token chunk
is timed. Whatever happens, the server is stopped before the next variant starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.bench.client import RequestTiming, StreamingChatClient, TimingLog
from specpilot.bench.steady import percentiles_ms, steady_window, tokens_in_window
from specpilot.bench.variants import Prepared
from specpilot.engines.adapter import EngineRelease
from specpilot.engines.metrics import PreemptionSignal
from specpilot.errors import UserError
from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.dispatch.endpoints import endpoint_of_run
from specpilot.generate.dispatch.servers import parse_metrics
from specpilot.generate.job import JobConfig, generate_in_loop
from specpilot.generate.sampling import Sampling
from specpilot.generate.yields import YieldFloor
from specpilot.hosts import open_host_section
from specpilot.launch.ops import run_down
from specpilot.launch.outcome import Progress, UpResult
from specpilot.launch.state import read_state
from specpilot.launch.supervisor import launch_planned
from specpilot.spec import Spec
from specpilot.taskgroup import beside

#: the warm-up's rows and output length: enough to run every kernel and batch shape once
WARMUP_ROWS = 8
WARMUP_MAX_TOKENS = 32
DOWN_TIMEOUT_S = 30.0
GUARD_TICK_S = 0.1
SERVER_INFO_TIMEOUT_S = 10.0
#: SGLang reports the acceptance of the last decode batches here (no --enable-metrics needed);
#: newer releases name it /server_info and keep /get_server_info as a deprecated alias
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")

Notify = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    """What every variant shares: the sample, the sampling parameters, the bounds."""

    sample_path: Path
    warmup_path: Path
    sample_rows: int
    sampling: Sampling
    budget_s: float
    warmup_s: float
    progress_interval_s: float
    request_timeout_s: float


@dataclass
class Measured:
    """One variant's row of the result (`to_json` is what bench.json holds)."""

    label: str
    status: str  # measured | refused | failed | no_steady_state
    reason: str | None = None
    argv: list[str] = field(default_factory=list)
    recommended_args: list[str] = field(default_factory=list)
    max_running_requests: int | None = None
    up_s: float | None = None
    rows_done: int = 0
    rows_failed: int = 0
    budget_reached: bool = False
    output_tokens_per_s: float | None = None
    whole_run_output_tokens_per_s: float | None = None
    steady_s: float | None = None
    steady_min_in_flight: int | None = None
    peak_in_flight: int | None = None
    accept_length: float | None = None
    accept_source: str | None = None
    ttft_ms: dict[str, float] | None = None
    itl_ms: dict[str, float] | None = None
    mean_output_tokens: float | None = None
    finish_reasons: dict[str, int] = field(default_factory=dict)
    #: the whole job's projected wall time, its tail's share and GPU-hours (bench.jobtime)
    projected_s: float | None = None
    tail_share: float | None = None
    gpu_hours: float | None = None
    #: the search's word on the point (screened | predicted | measured | ...) and what its
    #: projection rests on
    search: str | None = None
    basis: str | None = None
    #: output tok/s per number of requests in flight, as the projection reads them
    rates_by_batch: list[dict[str, float]] = field(default_factory=list)
    #: the most requests seen in flight (the rates' `largest`)
    largest_in_flight: int | None = None
    #: requests the engine took off for KV room during the sample (vLLM's preemptions, SGLang's
    #: retractions: `preemption_source` says which and how they were read); None: not known
    preemptions: int | None = None
    preemption_source: str | None = None
    #: the search's word on the point: measured at its own cap, or projected from another's screen
    predicted: bool = False
    #: why the search tried this cap (the plan's maximum, half, a quarter, KV-bound, the knee)
    origin: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items()}


@dataclass
class _Guard:
    """Bounds a generate job: stops it at the deadline; prints progress."""

    deadline_s: float
    label: str
    notify: Notify
    progress_interval_s: float
    rows: int = 0  # rows the job sends (the progress line's denominator)
    dispatcher: Dispatcher | None = None
    budget_reached: bool = False

    @contextlib.asynccontextmanager
    async def watch(self, dispatcher: Dispatcher) -> AsyncIterator[object]:
        self.dispatcher = dispatcher
        async with beside(lambda: self._run(dispatcher), f"the guard of {self.label}'s job"):
            yield self

    async def _run(self, dispatcher: Dispatcher) -> None:
        last_line_s = time.monotonic()
        while True:
            await asyncio.sleep(GUARD_TICK_S)
            now = time.monotonic()
            if now >= self.deadline_s and dispatcher.stop_reason is None:
                self.budget_reached = True
                dispatcher.stop_for(f"{self.label}: --budget-s reached")
                return
            if self.progress_interval_s and now - last_line_s >= self.progress_interval_s:
                last_line_s = now
                stats = dispatcher.stats
                self.notify(
                    f"{self.label}: {stats.done}/{self.rows} rows, "
                    f"{dispatcher.pool.total_in_flight()} in flight, "
                    f"{stats.completion_tokens:,} output tokens"
                )


def _job(settings: Settings, prepared: Prepared, folder: Path, **changes: Any) -> JobConfig:
    plan = prepared.plan
    concurrency = plan.max_running_requests if plan is not None else 1
    base = JobConfig(
        input_path=settings.sample_path,
        output_dir=folder,
        endpoints=[endpoint_of_run(prepared.spec.name)],
        model=None,
        api_key=prepared.api_key,
        sampling=settings.sampling,
        concurrency=max(1, concurrency),
        max_attempts=2,
        retry_base_s=0.5,
        request_timeout_s=settings.request_timeout_s,
        give_up_after_s=30.0,
        show_progress=False,
        yield_floor=YieldFloor(min_clean_pct=0.0),  # a bench measures speed, whatever the rows say
        drain_on_signal=False,  # a signal ends the bench at once: `measure` stops the server on the way out
    )
    return replace(base, **changes)


async def measure(
    prepared: Prepared, release: EngineRelease, settings: Settings, folder: Path, notify: Notify
) -> tuple[Measured, list[RequestTiming]]:
    """Start, warm up, measure and stop one variant (refused ones come back as they are);
    the row, and every answered request's timings (what the search reads rates from)."""
    label = prepared.variant.label
    row = _first_row(prepared)
    if prepared.refused:
        notify(f"{label}: not started: {prepared.refused}")
        return row, []
    deadline_s = time.monotonic() + settings.budget_s
    spec_timeout_s = prepared.spec.server.ready_timeout_s
    spec = _start_within(prepared.spec, settings.budget_s)
    notify(f"{label}: starting {spec.engine.name} {spec.engine.version} ({' '.join(prepared.recommended)})")
    try:
        result = await _up(spec, release, prepared, lambda phase, s, last: None)
        if result.phase != "ready":
            row.status, row.reason = "failed", _failure(result, settings.budget_s, spec_timeout_s)
            notify(f"{label}: {row.reason}")
            return row, []
        row.up_s = round(result.elapsed_s, 1)
        notify(f"{label}: ready in {result.elapsed_s:.1f} s; warming up")
        await _warm_up(prepared, settings, folder, deadline_s, notify)
        if time.monotonic() >= deadline_s:
            row.status, row.reason, row.budget_reached = (
                "failed",
                "the budget ran out before the sample",
                True,
            )
            return row, []
        timings = await _measure_sample(
            row,
            prepared,
            spec,
            release.engine.preemption,
            settings,
            folder,
            result.endpoint,
            deadline_s,
            notify,
        )
        notify(f"{label}: {_summary(row)}; stopping")
        return row, timings
    finally:
        await _stop(spec.name, notify, label)


def _first_row(prepared: Prepared) -> Measured:
    """The variant's row before it runs: refused with plan's reason, else to be measured."""
    return Measured(
        label=prepared.variant.label,
        status="refused" if prepared.refused else "measured",
        reason=prepared.refused,
        argv=prepared.shown_argv(),
        recommended_args=list(prepared.recommended),
        max_running_requests=prepared.plan.max_running_requests if prepared.plan else None,
    )


def _start_within(spec: Spec, budget_s: float) -> Spec:
    """The spec with its ready timeout cut to the budget: the engine's start counts against it too."""
    server = spec.server.model_copy(update={"ready_timeout_s": min(spec.server.ready_timeout_s, budget_s)})
    return spec.model_copy(update={"server": server})


async def _warm_up(
    prepared: Prepared, settings: Settings, folder: Path, deadline_s: float, notify: Notify
) -> None:
    """A short job of a few rows and answers, so the sample's timings see no first-kernel costs."""
    label = prepared.variant.label
    warm = _Guard(min(deadline_s, time.monotonic() + settings.warmup_s), label, notify, 0.0)
    await generate_in_loop(
        _job(
            settings,
            prepared,
            folder / "warmup",
            input_path=settings.warmup_path,
            sampling=replace(
                settings.sampling,
                max_tokens=min(settings.sampling.max_tokens or WARMUP_MAX_TOKENS, WARMUP_MAX_TOKENS),
            ),
        ),
        warm.watch,
    )


async def _measure_sample(
    row: Measured,
    prepared: Prepared,
    spec: Spec,
    preemption: PreemptionSignal | None,
    settings: Settings,
    folder: Path,
    endpoint: str | None,
    deadline_s: float,
    notify: Notify,
) -> list[RequestTiming]:
    """Stream the sample at the cap; fill the row from its timings and the engine's counters."""
    label = row.label
    log = TimingLog()
    guard = _Guard(deadline_s, label, notify, settings.progress_interval_s, settings.sample_rows)
    concurrency = max(1, row.max_running_requests or 1)
    notify(f"{label}: measuring {settings.sample_rows} rows at {concurrency} requests in flight (its cap)")
    counted_before = _counter(endpoint, preemption)
    sample_started_s = time.monotonic()
    await generate_in_loop(
        _job(
            settings,
            prepared,
            folder / "sample",
            client_factory=lambda session, model, sampling: _streaming(session, model, sampling, log),
        ),
        guard.watch,
    )
    elapsed_s = time.monotonic() - sample_started_s
    row.budget_reached = guard.budget_reached
    _fill(row, log, elapsed_s)
    row.accept_length, row.accept_source = _acceptance(endpoint, guard.dispatcher)
    row.preemptions, row.preemption_source = await _preemptions(
        spec, preemption, counted_before, _counter(endpoint, preemption)
    )
    return list(log.requests)


def _streaming(
    session: aiohttp.ClientSession, model: str, sampling: Sampling, log: TimingLog
) -> StreamingChatClient:
    return StreamingChatClient(session, model, sampling, log)


async def _up(spec: Spec, release: EngineRelease, prepared: Prepared, progress: Progress) -> UpResult:
    host = open_host_section(spec.host)
    try:
        return await launch_planned(spec, release, host, plan=prepared.plan, progress=progress)
    finally:
        await host.close()


def _failure(result: UpResult, share_s: float, spec_timeout_s: float) -> str:
    if result.cause == "timeout" and share_s < spec_timeout_s:
        # the budget left cut the start, not the spec's own ready_timeout_s: name the knob that
        # moves it (an H200 search whose --budget-s left 120 s a start was told to raise the spec's)
        return (
            f"did not start within what was left of the budget ({share_s:.0f} s; the spec allows "
            f"{spec_timeout_s:.0f} s): raise --budget-s (a first start on a machine compiles kernels)"
        )
    first = (result.error or "").strip().splitlines()
    detail = f": {first[-1][:200]}" if first else ""
    return f"did not start ({result.phase}, {result.cause}){detail}"


def _fill(row: Measured, log: TimingLog, elapsed_s: float) -> None:
    done = log.requests
    row.rows_done = len(done)
    row.rows_failed = log.failed
    if not done:
        why = f" (the last error: {log.last_error})" if log.last_error else ""
        row.status, row.reason = "failed", f"no request was answered{why}"
        return
    _fill_answers(row, done, elapsed_s)
    window = steady_window(done)
    if window is None:
        row.status, row.reason = "no_steady_state", "no interval with requests in flight"
        return
    row.steady_s = round(window.duration_s, 2)
    row.steady_min_in_flight, row.peak_in_flight = window.threshold, window.peak
    row.output_tokens_per_s = round(tokens_in_window(done, window) / window.duration_s, 1)


def _fill_answers(row: Measured, done: list[RequestTiming], elapsed_s: float) -> None:
    """What the answers say over the whole run: their lengths, endings, rate and latencies."""
    tokens = [r.output_tokens for r in done]
    row.mean_output_tokens = round(sum(tokens) / len(tokens), 1)
    row.finish_reasons = dict(Counter(r.finish_reason or "none" for r in done).most_common())
    row.whole_run_output_tokens_per_s = round(sum(tokens) / elapsed_s, 1) if elapsed_s > 0 else None
    row.ttft_ms = percentiles_ms([r.ttft_s for r in done])
    row.itl_ms = percentiles_ms([gap for r in done for gap in r.itl_s])


def _acceptance(endpoint: str | None, dispatcher: Dispatcher | None) -> tuple[float | None, str | None]:
    """SGLang's avg_spec_accept_length (/get_server_info), else what the job read from
    /metrics (vLLM's accepted/drafts counters over the sample, SGLang's gauge)."""
    found = _server_info_acceptance(endpoint) if endpoint else None
    if found is not None:
        return found
    accept = dispatcher.accept_length() if dispatcher is not None else None
    return (round(accept, 3), "/metrics") if accept is not None else (None, None)


def _server_info_acceptance(endpoint: str) -> tuple[float, str] | None:
    """The mean avg_spec_accept_length of the first server-info path that answers; None where
    none answers or the release reports no acceptance there."""
    for path in SERVER_INFO_PATHS:
        info = _server_info(f"{endpoint}{path}")
        values = _accept_lengths(info)
        if values and max(values) > 0:
            return round(sum(values) / len(values), 3), f"{path} avg_spec_accept_length"
        if info is not None:
            return None  # the release answered: it has no acceptance to report there
    return None


def _accept_lengths(info: object) -> list[float]:
    """Each scheduler's avg_spec_accept_length in a server-info answer."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    return [
        float(s["avg_spec_accept_length"])
        for s in (states if isinstance(states, list) else [])
        if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), int | float)
    ]


def _counter(endpoint: str | None, signal_: PreemptionSignal | None) -> float | None:
    """The engine's preemption counter on /metrics now; None where it exports none."""
    if endpoint is None or signal_ is None or signal_.counter is None:
        return None
    try:
        with urllib.request.urlopen(f"{endpoint}/metrics", timeout=SERVER_INFO_TIMEOUT_S) as answer:
            return parse_metrics(answer.read().decode("utf-8", "replace")).get(signal_.counter)
    except (OSError, urllib.error.URLError, ValueError):
        return None


def count_preemptions(signal_: PreemptionSignal, log_text: str) -> int:
    """The requests the engine's log says it preempted (retracted) in `log_text`."""
    if signal_.log_line is None:
        return 0
    found = 0
    for match in signal_.log_line.finditer(log_text):
        count = match.groupdict().get("count")
        found += int(count) if count is not None else 1
    return found


async def _preemptions(
    spec: Spec, signal_: PreemptionSignal | None, before: float | None, after: float | None
) -> tuple[int | None, str | None]:
    """The preemptions seen over the sample: the counter's growth where /metrics has it, else the
    log's lines since the engine was ready (the warm-up's few short rows included)."""
    if signal_ is None:
        return None, None
    if before is not None and after is not None:
        return round(after - before), f"{signal_.word}: /metrics {signal_.counter}"
    if signal_.log_line is None:
        return None, None
    try:
        state = read_state(spec.name)
        host = open_host_section(spec.host)
        try:
            text = (await host.read_bytes(state.log_path, state.ready_log_bytes or 0)).decode(
                "utf-8", "replace"
            )
        finally:
            await host.close()
    except (UserError, OSError):
        return None, None
    return count_preemptions(signal_, text), f"{signal_.word}: the engine log's lines"


def _server_info(url: str) -> object:
    """The JSON a GET of `url` answers, None when it answers nothing usable (404 included)."""
    try:
        with urllib.request.urlopen(url, timeout=SERVER_INFO_TIMEOUT_S) as answer:
            return json.loads(answer.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _summary(row: Measured) -> str:
    if row.output_tokens_per_s is None:
        return row.reason or row.status
    accept = "-" if row.accept_length is None else f"{row.accept_length:.2f}"
    return (
        f"{row.output_tokens_per_s:,.0f} out tok/s steady over {row.steady_s:.1f} s, "
        f"acceptance {accept}, {row.rows_done} rows"
    )


async def _stop(name: str, notify: Notify, label: str) -> None:
    """`down` of the variant's run, if it got as far as a process."""
    try:
        state = read_state(name)
    except UserError:
        return
    if state.phase not in ("starting", "ready"):
        return
    # an impatient second Ctrl-C must not leave the server running: the stop ends first
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = await run_down(name, timeout_s=DOWN_TIMEOUT_S)
    finally:
        signal.signal(signal.SIGINT, previous)
    notify(f"{label}: stopped ({result['stopped']})")
