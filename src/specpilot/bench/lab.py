"""The search's measurer for an engine started as `up` starts it, and the axes a spec has.

`EngineLab.plan` checks and plans a point once (`variants.prepare`: what check refuses or
what does not fit is refused, never started); `EngineLab.measure` starts it, sends it a
share of the sample (`bench.measure`) and stops it, and reads the per-request timings back
as rates per batch size (`jobtime.batch_rates`). A screen sends `rows` of the sample drawn
evenly across it (the sample is in a seeded random order, so any even draw keeps its mix of
short and long prompts).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import replace
from pathlib import Path

from specpilot.bench.jobtime import batch_rates
from specpilot.bench.measure import Notify, Settings, measure
from specpilot.bench.sample import write_prompts
from specpilot.bench.search import Planned, Trial
from specpilot.bench.variants import Prepared, Variant, adaptive_flag, prepare, release_name, spec_method
from specpilot.engines.adapter import Engine, EngineRelease
from specpilot.generate.rows.types import PromptRow
from specpilot.interrupts import received
from specpilot.models.host_files import ModelRead
from specpilot.plan.types import PrefillGate
from specpilot.spec import Spec

#: the longest run name a spec may carry (spec.py's `name` pattern)
RUN_NAME_MAX_CHARS = 64
#: hex digits of the whole name's hash a cut name ends with
NAME_HASH_CHARS = 8


def run_name(spec: Spec, point: Variant) -> str:
    """The point's run name (a directory name: no '@'); one longer than a run name may be keeps
    its start and ends with a hash of the whole, so two points never share a name however long."""
    whole = f"{spec.name}-bench-{point.label}".replace("@", "-at-")
    name = whole.lower().replace("_", "-")
    if len(name) <= RUN_NAME_MAX_CHARS:
        return name
    digest = hashlib.sha256(whole.encode()).hexdigest()[:NAME_HASH_CHARS]
    return f"{name[: RUN_NAME_MAX_CHARS - NAME_HASH_CHARS - 1].rstrip('.-')}-{digest}"


def folder_name(point: Variant) -> str:
    return point.label.replace("@", "-at-")


def spread(rows: list[PromptRow], count: int) -> list[PromptRow]:
    """`count` rows drawn evenly across `rows` (all of them when count covers them)."""
    if count >= len(rows):
        return list(rows)
    return [rows[i * len(rows) // count] for i in range(count)]


class EngineLab:
    """Plans and measures points of one spec on its host, one at a time."""

    def __init__(
        self,
        spec: Spec,
        release: EngineRelease,
        settings: Settings,
        rows: list[PromptRow],
        scratch: Path,
        notify: Notify,
        started: list[str] | None = None,
        files: ModelRead | None = None,
    ):
        self.spec, self.settings, self.rows, self.scratch, self.notify = spec, settings, rows, scratch, notify
        #: the spec's engine release, as the bench's command resolved it (a point changes flags only)
        self.release = release
        self.prepared: dict[Variant, Prepared] = {}
        #: configuration -> its plan's word on the release's prefill-graph gate (None: no gate)
        self.gates: dict[Variant, PrefillGate | None] = {}
        #: every run name a measurement may have started (the bench's stop path stops each)
        self.started: list[str] = [] if started is None else started
        #: the spec's model as the bench read it, once: every point plans on it
        self.files = files

    def prepare(self, point: Variant) -> Prepared:
        if point not in self.prepared:
            prepared = prepare(self.spec, self.release, point, run_name(self.spec, point), self.files)
            if prepared.refused:
                self.notify(f"{point.label}: not started: {prepared.refused}")
            self.prepared[point] = prepared
        return self.prepared[point]

    def plan(self, point: Variant) -> Planned:
        prepared = self.prepare(point)
        if prepared.plan is None:
            return Planned(None, prepared.refused or "no plan")
        plan = prepared.plan
        if point.running_cap is not None or point.prefill_graph is not None:
            return Planned(plan.max_running_requests, kv_tokens=plan.kv_tokens)
        gate = self.gates[point] = plan.prefill_gate
        return Planned(
            plan.max_running_requests, other_side=other_side(point, gate), kv_tokens=plan.kv_tokens
        )

    async def measure(self, point: Variant, rows: int, budget_s: float) -> Trial:
        prepared = self.prepare(point)
        kind = "sample" if rows >= len(self.rows) else "screen"
        folder = self.scratch / folder_name(point) / kind
        prompts = folder / "prompts.jsonl"
        write_prompts(spread(self.rows, rows), prompts)
        settings = replace(
            self.settings, sample_path=prompts, sample_rows=min(rows, len(self.rows)), budget_s=budget_s
        )
        settings = replace(settings, request_timeout_s=budget_s)
        self.notify(f"{point.label}: {kind} of {settings.sample_rows} rows, at most {budget_s:.0f} s")
        if not prepared.refused:  # before the start: its engine may appear at any moment
            self.started.append(prepared.spec.name)
        started_s = time.monotonic()
        row, timings = await measure(prepared, self.release, settings, folder, self.notify)
        cost_s = time.monotonic() - started_s
        if received():  # a signal whose cancellation something swallowed still ends the bench
            raise asyncio.CancelledError
        ok = bool(timings) and row.status in ("measured", "no_steady_state")
        lengths = tuple(t.output_tokens for t in timings)
        rates = batch_rates(timings)
        row.rates_by_batch, row.largest_in_flight = rates.to_json(), rates.largest
        asked = tuple(t.prompt_tokens for t in timings if t.prompt_tokens > 0)
        return Trial(ok, row.reason, rates, lengths, cost_s, row, asked, row.preemptions)


def other_side(config: Variant, gate: PrefillGate | None) -> Variant | None:
    """The configuration on the other side of the gate, where its plan says the gate is near
    and something fits there."""
    if gate is None or not gate.near or not gate.other_side_args:
        return None
    return replace(
        config,
        prefill_graph="off" if gate.graph_kept else "kept",
        side_args=gate.other_side_args,
        replan=gate.replan,
    )


def gate_axis(release: str, gates: dict[Variant, PrefillGate | None]) -> str:
    """The prefill-graph axis line: per configuration, its side of the gate and what was added."""
    known = {config: gate for config, gate in gates.items() if gate is not None}
    if not known:
        return (
            "prefill CUDA graph on/off: not explored (no configuration's plan meets a prefill-graph "
            f"gate: {release} has none, or captures no prefill graph at the planned knobs)"
        )
    parts = []
    for config, gate in known.items():
        where = (
            f"{config.label}: {gate.free_gib:.2f} GiB free at the prefill graph's capture against the "
            f"{gate.gate_gib:.2f} GiB gate"
        )
        if not gate.near:
            parts.append(f"{where}, not near")
        elif (side := other_side(config, gate)) is not None:
            parts.append(f"{where}; added beside it: {side.label}, {gate.other_side}")
        else:
            parts.append(f"{where}, near; {gate.other_side}")
    return "prefill CUDA graph on/off: " + "; ".join(parts)


def layout_axis(gpus_per_server: int, host_gpus: int) -> str:
    """The layout line: what was measured (one engine of the spec's GPUs) and what of the
    job's layout is only projected from it."""
    if host_gpus <= 1:
        return "layout: one GPU (one engine: no layout to compare)"
    servers = host_gpus // gpus_per_server
    if servers == 1 and host_gpus == gpus_per_server:
        return (
            f"layout: one engine of {host_gpus} GPUs (the spec's [gpu] count), measured as it runs; "
            "other tensor-parallel layouts are not started by this bench"
        )
    idle = host_gpus - servers * gpus_per_server
    left = f"; {idle} GPU{'s' if idle != 1 else ''} left idle" if idle else ""
    return (
        f"layout: measured: one engine of {gpus_per_server} GPU{'s' if gpus_per_server != 1 else ''} "
        f"(the spec's [gpu] count); projected, not measured: {servers} such engine"
        f"{'s' if servers != 1 else ''} side by side on {host_gpus} GPUs, each at the measured rates{left}; "
        "other tensor-parallel layouts are not started by this bench"
    )


def axis_notes(
    spec: Spec,
    release: EngineRelease,
    configs: list[Variant],
    host_gpus: int,
    gates: dict[Variant, PrefillGate | None],
) -> list[str]:
    """One line per axis: the values explored, or why the axis is not."""
    method = spec_method(spec, release)
    return [
        _speculation_axis(method, configs),
        _adaptive_axis(release, method, configs),
        _running_axis(release.engine),
        gate_axis(release_name(release), gates),
        layout_axis(spec.gpu.count, host_gpus),
    ]


def _speculation_axis(method: str | None, configs: list[Variant]) -> str:
    """The speculation line: plain and the methods at their draft tokens."""
    speculative = [c.label for c in configs if c.method is not None and not c.adaptive]
    if method is None and not speculative:
        return "speculation: plain only (the spec turns on no speculative method; --variants names one)"
    plain = ["plain"] if any(c.method is None for c in configs) else []
    return "speculation: " + ", ".join([*plain, *speculative])


def _adaptive_axis(release: EngineRelease, method: str | None, configs: list[Variant]) -> str:
    """The adaptive-speculation line: the adaptive configurations, or why there are none."""
    adaptive = [c.label for c in configs if c.adaptive]
    if adaptive_flag(release) is None:
        flag = release.engine.draft.adaptive_flag
        have = f"no {flag}" if flag else "no adaptive speculation"
        return f"adaptive speculation: not explored ({release_name(release)} has {have})"
    if method is None and not adaptive:
        return "adaptive speculation: not explored (no speculative method)"
    return f"adaptive speculation: {', '.join(adaptive) or 'not asked for (--variants)'}"


def _running_axis(engine: Engine) -> str:
    """The running-request caps line: which caps, and what lowers them further."""
    word = "preemptions" if engine.preemption is None else engine.preemption.word
    return (
        f"running requests ({engine.draft.running_cap_flag}): the plan's maximum, half and a quarter "
        "of it, and the cap whose running requests the KV cache holds whole (the plan's KV tokens / "
        "the sample's mean prompt and answer), per configuration; lower while the engine reports "
        f"{word} (its KV cache ran out) or the throughput still rises"
    )
