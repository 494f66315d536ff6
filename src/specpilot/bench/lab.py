"""The search's measurer for an engine started as `up` starts it, and the axes a spec has.

`EngineLab.plan` checks and plans a point once (`variants.prepare`: what check refuses or
what does not fit is refused, never started); `EngineLab.measure` starts it, sends it a
share of the sample (`bench.measure`) and stops it, and reads the per-request timings back
as rates per batch size (`jobtime.batch_rates`). A screen sends `rows` of the sample drawn
evenly across it (the sample is in a seeded random order, so any even draw keeps its mix of
short and long prompts).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from specpilot.bench.jobtime import batch_rates
from specpilot.bench.measure import Notify, Settings, measure
from specpilot.bench.sample import write_prompts
from specpilot.bench.search import Planned, Trial
from specpilot.bench.variants import Prepared, Variant, adaptive_flag, prepare, spec_method
from specpilot.engines.registry import engine_by_name
from specpilot.generate.types import PromptRow
from specpilot.launch.shield import received, take_over_signals
from specpilot.models.host_files import ModelRead
from specpilot.spec import Spec


def run_name(spec: Spec, point: Variant) -> str:
    """The point's run name (a directory name: no '@')."""
    return f"{spec.name}-bench-{point.label}".replace("@", "-at-")[:64].lower().replace("_", "-")


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
        settings: Settings,
        rows: list[PromptRow],
        scratch: Path,
        notify: Notify,
        started: list[str] | None = None,
        files: ModelRead | None = None,
    ):
        self.spec, self.settings, self.rows, self.scratch, self.notify = spec, settings, rows, scratch, notify
        self.prepared: dict[Variant, Prepared] = {}
        #: every run name a measurement may have started (the bench's stop path stops each)
        self.started: list[str] = [] if started is None else started
        #: the spec's model as the bench read it, once: every point plans on it
        self.files = files

    def prepare(self, point: Variant) -> Prepared:
        if point not in self.prepared:
            prepared = prepare(self.spec, point, run_name(self.spec, point), self.files)
            if prepared.refused:
                self.notify(f"{point.label}: not started: {prepared.refused}")
            self.prepared[point] = prepared
        return self.prepared[point]

    def plan(self, point: Variant) -> Planned:
        prepared = self.prepare(point)
        if prepared.plan is None:
            return Planned(None, prepared.refused or "no plan")
        return Planned(prepared.plan.max_running_requests)

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
        take_over_signals()  # a generate job's loop hands them back to Python's defaults
        if not prepared.refused:  # before the start: its engine may appear at any moment
            self.started.append(prepared.spec.name)
        started_s = time.monotonic()
        row, timings = await measure(prepared, settings, folder, self.notify)
        cost_s = time.monotonic() - started_s
        if received():  # a signal whose interrupt something swallowed still ends the bench
            raise KeyboardInterrupt
        ok = bool(timings) and row.status in ("measured", "no_steady_state")
        lengths = tuple(t.output_tokens for t in timings)
        rates = batch_rates(timings)
        row.rates_by_batch = rates.to_json()
        return Trial(ok, row.reason, rates, lengths, cost_s, row)


def axis_notes(spec: Spec, configs: list[Variant], host_gpus: int) -> list[str]:
    """One line per axis: the values explored, or why the axis is not."""
    engine = engine_by_name(spec.engine.name)
    release = f"{engine.display_name} {spec.engine.version}"
    method = spec_method(spec)
    speculative = [c.label for c in configs if c.method is not None and not c.adaptive]
    notes = [
        "speculation: "
        + ", ".join(["plain", *speculative] if any(c.method is None for c in configs) else speculative)
        if method is not None or speculative
        else "speculation: plain only (the spec turns on no speculative method; --variants names one)"
    ]
    adaptive = [c.label for c in configs if c.adaptive]
    flag = engine.draft.adaptive_flag
    if adaptive_flag(spec) is None:
        have = f"no {flag}" if flag else "no adaptive speculation"
        notes.append(f"adaptive speculation: not explored ({release} has {have})")
    elif method is None and not adaptive:
        notes.append("adaptive speculation: not explored (no speculative method)")
    else:
        notes.append(f"adaptive speculation: {', '.join(adaptive) or 'not asked for (--variants)'}")
    notes.append(
        f"running requests ({engine.draft.running_cap_flag}): the plan's maximum, half and a quarter "
        "of it, per configuration"
    )
    notes.append("prefill CUDA graph on/off: not explored (specpilot does not yet model the gate per point)")
    if host_gpus <= 1:
        notes.append("layout: not explored (one GPU: one engine, no tensor-parallel layout to compare)")
    else:
        servers = host_gpus // spec.gpu.count
        notes.append(
            f"layout: the spec's {spec.gpu.count} GPU{'s' if spec.gpu.count != 1 else ''} per engine, "
            "projected as "
            f"{servers} engine{'s' if servers != 1 else ''} on {host_gpus} GPUs; other tensor-parallel "
            "layouts are not started by this bench"
        )
    return notes
