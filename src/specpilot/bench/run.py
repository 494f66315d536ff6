"""The whole bench: plan, sample, the search over the points (`bench.search`), the winner,
the files it leaves.

Files, all under the job folder (`--job`, the `--output` the real `generate` will use):
`bench.json` (the result `plan`, `generate` and `report` project from), `bench.svg`, and
`bench/` (the sample, and per point the scratch ledgers of its screen and full sample).
The winner is the point whose projected time for the whole input, waves and tail included
(`bench.jobtime`), is shortest. Speculative decoding does not change what the model writes,
so every projection plays the same output lengths (the sample's) and the points differ only
in the rate they sustain at each number of requests in flight.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from specpilot import __version__, jsontext
from specpilot.atomic import write_text_atomic
from specpilot.bench.budget import BudgetNeed, Costs, start_costs
from specpilot.bench.lab import EngineLab, axis_notes
from specpilot.bench.measure import Measured, Notify, Settings
from specpilot.bench.sample import Sample, draw, open_prompts, write_prompts
from specpilot.bench.search import CAP_ORIGINS, CONFIRM_MAX, MARGIN, Entry, Job, SearchResult, search
from specpilot.bench.variants import Variant
from specpilot.engines.adapter import EngineRelease
from specpilot.errors import JobFailed, UserError
from specpilot.generate.sampling import Sampling
from specpilot.hosts import open_host_section
from specpilot.launch.shield import stop_started
from specpilot.launch.state import home_error, specpilot_home
from specpilot.models.host_files import read_model
from specpilot.projection import BENCH_FILE
from specpilot.spec import Spec, spec_to_toml

SCRATCH_DIR = "bench"
#: the full sample fills the largest running-request cap this many times (waves and a drain)
FILL_WAVES = 2
SVG_FILE = "bench.svg"
REACH_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class BenchRequest:
    spec: Spec
    #: the spec's engine release (`check.resolved.release_of`, once per command): every variant
    #: runs it, with its own flags
    release: EngineRelease
    prompts: Path
    job_dir: Path
    #: the configurations the search explores (each at three running-request caps)
    variants: list[Variant]
    sample_size: int
    seed: int
    settings: Settings
    #: GPUs the job runs on (None: one server's)
    gpus: int | None = None


@dataclass
class BenchResult:
    spec: Spec
    variants: list[Measured]
    specs: dict[str, Spec]
    winner: str | None
    input_rows: int
    sample_rows: int
    mean_output_tokens: float | None
    data: dict[str, Any]
    #: one line per axis: explored or why not
    axes: list[str]
    #: the search's own word on its result (a point it left unconfirmed, say)
    notes: list[str]
    #: whether any point was started (else nothing could be measured)
    started: bool
    #: why there is no winner: what was measured, what was not and why, and the budget that
    #: would measure it (None with a winner)
    verdict: str | None = None


def plan_settings(
    job_dir: Path,
    *,
    sample_rows: int,
    sampling: Sampling,
    budget_s: float,
    warmup_s: float,
    progress_interval_s: float,
) -> Settings:
    scratch = job_dir / SCRATCH_DIR
    return Settings(
        sample_path=scratch / "sample.jsonl",
        warmup_path=scratch / "warmup.jsonl",
        sample_rows=sample_rows,
        sampling=sampling,
        budget_s=budget_s,
        warmup_s=warmup_s,
        progress_interval_s=progress_interval_s,
        request_timeout_s=budget_s,
    )


def check_budget(budget_s: float, warmup_s: float) -> None:
    if budget_s <= warmup_s:
        raise UserError(
            f"{budget_s:g} s leaves nothing after the {warmup_s:g} s warm-up (and the engine's start)",
            field="--budget-s",
            fix=f"pass --budget-s well above --warmup-s {warmup_s:g} (a real GPU start alone takes minutes), "
            "or lower --warmup-s",
        )


async def reach_host(spec: Spec) -> None:
    """Connect to the spec's host once, so an unreachable one is refused before any work."""
    host = open_host_section(spec.host)
    try:
        await host.run(["true"], timeout_s=REACH_TIMEOUT_S)
    finally:
        await host.close()


@contextlib.contextmanager
def bench_lock(spec: Spec) -> Iterator[None]:
    """One bench per spec name and per host port at a time: two would start variants of one
    name, or on one port, and stop each other's servers or leave them running."""
    folder = specpilot_home() / "locks"
    keys = {
        f"bench-{spec.name}": f"another bench of spec {spec.name!r} is running",
        f"port-{spec.host.target}-{spec.server.port}": (
            f"another bench uses port {spec.server.port} on {spec.host.target}"
        ),
    }
    with contextlib.ExitStack() as held:
        for key, busy in keys.items():
            lock = folder / f"{re.sub(r'[^A-Za-z0-9._-]', '_', key)}.lock"
            try:  # a read-only or full SPECPILOT_HOME: one line naming it
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                handle = held.enter_context(lock.open("a"))
            except OSError as err:
                raise home_error(err) from None
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(
                    busy,
                    field="SPEC",
                    fix="wait for it to end, or give this spec another name and [server] port",
                ) from None
        yield


async def run_bench(request: BenchRequest, notify: Notify, started: list[str] | None = None) -> BenchResult:
    """Search the points (refused ones keep their reason); write bench.json.

    Whatever ends it (a point's death, a signal, an error), every point it started is
    stopped on the way out, with the ending signals held (launch.shield): a JobFailed names
    what survived that stop. `started` (the caller's) is told each run name as a point may
    start: after an interrupt tore the loop down, the command proves them stopped again."""
    with bench_lock(request.spec):
        return await _run_bench(request, notify, [] if started is None else started)


async def _run_bench(request: BenchRequest, notify: Notify, started: list[str]) -> BenchResult:
    spec, settings = request.spec, request.settings
    source = open_prompts(request.prompts)
    await reach_host(spec)
    # the file and --sample are checked before any planning; the sample then grows to fill the caps
    sample = draw(source, request.sample_size, request.seed)
    files = await read_model(spec)
    scratch = request.job_dir / SCRATCH_DIR
    lab = EngineLab(spec, request.release, settings, [], scratch, notify, started, files)
    _plan_variants(lab, request.variants, notify)
    _check_startable(lab)
    largest = max((p.plan.max_running_requests for p in lab.prepared.values() if p.plan), default=0)
    if FILL_WAVES * largest > len(sample.rows) < sample.input_rows:
        sample = draw(source, request.sample_size, request.seed, fill_to=FILL_WAVES * largest)
    costs, need = _budget(request, lab, sample, notify)
    lab.rows = sample.rows
    _write_sample(sample, settings, request.sample_size, largest, notify)
    host_gpus = request.gpus or spec.gpu.count
    notes = axis_notes(spec, request.release, request.variants, host_gpus, lab.gates)
    for line in notes:
        notify(line)
    job = Job(sample.input_rows, servers=host_gpus // spec.gpu.count, gpus_per_server=spec.gpu.count)
    found = await _search_and_stop(request.variants, lab, job, len(sample.rows), settings, costs)
    return _result(request, lab, sample, job, notes, found, need, costs)


def _budget(
    request: BenchRequest, lab: EngineLab, sample: Sample, notify: Notify
) -> tuple[Costs, BudgetNeed]:
    """What a measurement costs and what the search needs, checked against the sample and the
    budget and told before any server starts."""
    settings = request.settings
    screen_caps = _screen_caps(lab, request.variants)
    _check_fillable(sample, screen_caps)
    costs = Costs(start_costs(request.spec, request.release), settings.warmup_s, settings.sampling.max_tokens)
    need = _announce_budget(costs, screen_caps, len(sample.rows), settings.budget_s, notify)
    _check_comparable(lab, request.variants, screen_caps)
    need.check(settings.budget_s, len(screen_caps))
    if len(request.variants) == 1:
        notify(f"{request.variants[0].label} alone: its caps are searched, no configuration is compared")
    return costs, need


def _result(
    request: BenchRequest,
    lab: EngineLab,
    sample: Sample,
    job: Job,
    notes: list[str],
    found: SearchResult,
    need: BudgetNeed,
    costs: Costs,
) -> BenchResult:
    """The search's table and winner; bench.json written."""
    rows = [_row(entry, lab) for entry in found.entries]
    specs = {
        entry.label: lab.prepare(entry.point).spec for entry in found.entries if entry.point in lab.prepared
    }
    lengths = found.lengths
    mean = sum(lengths) / len(lengths) if lengths else None
    winner = found.winner.label if found.winner is not None else None
    verdict = _verdict(found, costs, len(sample.rows))
    data = _bench_json(request, sample, job, notes, found, need, verdict, mean, rows)
    write_text_atomic(request.job_dir / BENCH_FILE, jsontext.dumps(data, indent=2) + "\n")
    return BenchResult(
        request.spec,
        rows,
        specs,
        winner,
        sample.input_rows,
        len(sample.rows),
        mean,
        data,
        notes,
        found.notes,
        found.started,
        verdict,
    )


def _plan_variants(lab: EngineLab, variants: list[Variant], notify: Notify) -> None:
    """Check and plan every configuration (and its other side of the prefill-graph gate)."""
    for config in variants:
        notify(f"{config.label}: check and plan")
        side = lab.plan(config).other_side
        if side is not None:  # planned now: its cap counts in the sample's size
            notify(f"{side.label}: check and plan (the prefill-graph gate is near {config.label})")
            lab.plan(side)


def _check_startable(lab: EngineLab) -> None:
    """Refuse a bench whose every configuration check or plan refuses, naming each one's reason
    and fix: nothing could start (it once searched, and asked for more --budget-s)."""
    configs = [p for c, p in lab.prepared.items() if c.running_cap is None]
    if any(p.plan is not None for p in configs):
        return
    by_reason: dict[str, list[str]] = {}
    for prepared in configs:
        by_reason.setdefault(prepared.refused or "no plan", []).append(prepared.variant.label)
    raise UserError(
        "check or plan refuses every configuration, so nothing can start: "
        + "; ".join(f"{', '.join(labels)}: {reason}" for reason, labels in by_reason.items()),
        field="--variants",
        fix="change the spec as each reason says (`specpilot check SPEC --fix` fixes what check "
        "refuses), or pass configurations that check and plan accept",
    )


def _check_fillable(sample: Sample, screen_caps: list[int]) -> None:
    """Refuse a sample too small to reach a steady state at the smallest largest cap."""
    if screen_caps and len(sample.rows) < min(screen_caps):
        raise UserError(
            f"{len(sample.rows)} rows (all {sample.input_rows} usable rows of the prompts file) cannot fill "
            f"{min(screen_caps)} running requests even once, so no steady state is reached at any "
            "configuration's largest cap",
            field="--prompts",
            fix=f"bench on a prompts file of at least {FILL_WAVES * min(screen_caps)} rows (the job's own), "
            "or run a job this small without a bench",
        )


def _announce_budget(
    costs: Costs, screen_caps: list[int], full_rows: int, budget_s: float, notify: Notify
) -> BudgetNeed:
    """What the search needs of the budget, told before any server starts."""
    need = costs.need(screen_caps, full_rows)
    notify(
        f"budget: {budget_s:g} s given; about {need.expected_s:,.0f} s to screen every "
        f"configuration and confirm {CONFIRM_MAX} points, {need.least_s:,.0f} s to measure "
        f"{'two configurations' if len(screen_caps) > 1 else 'one'} ({need.line})"
    )
    return need


def _check_comparable(lab: EngineLab, variants: list[Variant], screen_caps: list[int]) -> None:
    """Refuse a comparison where fewer than two of several configurations can run."""
    if len(variants) > 1 and len(screen_caps) < 2:
        runs = ", ".join(
            c.label for c, p in lab.prepared.items() if p.plan is not None and c.running_cap is None
        )
        raise UserError(
            f"only {runs or 'no configuration'} can run (the others are refused: see the lines above), so "
            "nothing can be compared",
            field="--variants",
            fix=f"pass --variants {runs} to measure it alone, or configurations that check and plan accept"
            if runs
            else "pass configurations that check and plan accept",
        )


def _write_sample(sample: Sample, settings: Settings, sample_size: int, largest: int, notify: Notify) -> None:
    """Write the sample and its warm-up rows, and say what was drawn."""
    write_prompts(sample.rows, settings.sample_path)
    write_prompts(sample.rows[: min(len(sample.rows), 8)], settings.warmup_path)
    chars = sorted(sample.prompt_chars)
    raised = (
        f"; raised from --sample {sample_size} to fill the largest cap ({largest}) {FILL_WAVES} times"
        if len(sample.rows) > sample_size
        else ""
    )
    notify(
        f"sample: {len(sample.rows)} of {sample.input_rows:,} rows, stratified by prompt length "
        f"({chars[0]:,} to {chars[-1]:,} characters, seed {sample.seed}){raised}"
    )


async def _search_and_stop(
    variants: list[Variant], lab: EngineLab, job: Job, full_rows: int, settings: Settings, costs: Costs
) -> SearchResult:
    """Run the search; whatever ends it, stop every point it started (JobFailed names survivors)."""
    try:
        return await search(
            variants,
            lab,
            job,
            full_rows=full_rows,
            budget_s=settings.budget_s,
            least_s=costs.starts.later_s + costs.expected_warmup_s,
        )
    finally:
        left = await stop_started(lab.started)
        if left:
            raise JobFailed("; ".join(left) + " (stopping what the bench started)")


def _bench_json(
    request: BenchRequest,
    sample: Sample,
    job: Job,
    notes: list[str],
    found: SearchResult,
    need: BudgetNeed,
    verdict: str | None,
    mean: float | None,
    rows: list[Measured],
) -> dict[str, Any]:
    """bench.json's content."""
    spec, settings = request.spec, request.settings
    return {
        "specpilot_version": __version__,
        "spec": spec.name,
        "engine": spec.engine.name,
        "engine_version": spec.engine.version,
        "gpu": spec.gpu.name,
        "gpu_memory_gib": spec.gpu.memory_gib,
        "gpus_per_server": spec.gpu.count,
        "servers": job.servers,
        "prompts": str(request.prompts),
        "input_rows": sample.input_rows,
        "sample": {
            "rows": len(sample.rows),
            "rejected_rows_in_file": sample.rejected_rows,
            "seed": sample.seed,
            "ids": [row.row_id for row in sample.rows],
            "prompt_chars": sample.prompt_chars,
        },
        "sampling": settings.sampling.to_json(),
        "budget_s": settings.budget_s,
        "warmup_s": settings.warmup_s,
        "steady_state": "longest interval with requests in flight >= ceil(0.9 x peak), "
        "as sglang.benchmark.steady_state_serving defines it",
        "projection": "the whole input played out per server: at most the cap running, each running "
        "request at rate(b)/b with b running (rates per batch size from the sample's timings), the "
        "sample's output lengths repeated; waves and the tail (after the last row starts) included",
        "search": _search_json(notes, found, need, verdict),
        "mean_output_tokens": None if mean is None else round(mean, 1),
        # what every projection played (plan --job, generate and report play them again)
        "output_lengths": list(found.lengths),
        "winner": found.winner.label if found.winner is not None else None,
        "variants": [r.to_json() for r in rows],
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _search_json(
    notes: list[str], found: SearchResult, need: BudgetNeed, verdict: str | None
) -> dict[str, Any]:
    """bench.json's `search`: the rule, what it explored and spent, and its verdict."""
    return {
        "rule": "screen each configuration once at its largest cap with one batch of rows; project every "
        "cap from the screen's rates per batch size (the KV-bound cap added); confirm best first with "
        "the full sample, the best of a second configuration among them, while a point is projected "
        "within "
        f"{MARGIN:.0%} of the best confirmed (at most {CONFIRM_MAX}); probe lower caps while the engine "
        "preempts or the throughput still rises; a winner only among points measured at their own cap, "
        "when two configurations were (or one was searched alone)",
        "axes": notes,
        "notes": found.notes,
        "compared": list(found.compared),
        "verdict": verdict,
        "budget": {
            "expected_s": round(need.expected_s, 1),
            "least_s": round(need.least_s, 1),
            "assumed": need.line,
        },
        "trials": found.trials,
        "spent_s": round(found.spent_s, 1),
        "points": len(found.entries),
    }


def _screen_caps(lab: EngineLab, variants: list[Variant]) -> list[int]:
    """Each planned configuration's largest cap, in the order the search screens them."""
    order = [c for c in lab.prepared if c.running_cap is None]
    ranked = sorted(order, key=lambda c: variants.index(c) if c in variants else len(variants))
    return [p.plan.max_running_requests for c in ranked if (p := lab.prepared[c]).plan is not None]


def _verdict(found: SearchResult, costs: Costs, rows: int) -> str | None:
    """The search's verdict with the budget that would screen what it did not measure."""
    if found.verdict is None:
        return None
    missing = [
        e.max_running_requests or 1
        for e in found.entries
        if e.point.config.label not in found.compared and e.origin == CAP_ORIGINS[0]
    ]
    more_s = sum(costs.measurement_s(1, min(cap, rows), cap) for cap in missing)
    return f"{found.verdict}; about {math.ceil(found.spent_s + more_s)} s of --budget-s would screen them too"


def _row(entry: Entry, lab: EngineLab) -> Measured:
    """The point's table row: its latest measurement, or what plan and the search say of it."""
    trial = entry.trial
    if trial is not None and isinstance(trial.row, Measured):
        row = copy.copy(trial.row)
    else:
        prepared = lab.prepared.get(entry.point)
        row = Measured(
            label=entry.label,
            status=entry.status,
            argv=prepared.shown_argv() if prepared is not None else [],
            recommended_args=list(prepared.recommended) if prepared is not None else [],
            max_running_requests=entry.max_running_requests,
        )
    row.search, row.basis = entry.status, entry.basis
    row.predicted = entry.status == "predicted"
    row.reason = entry.reason or row.reason
    row.origin = entry.origin
    if entry.origin and entry.origin not in CAP_ORIGINS:  # a KV-bound cap or a knee probe says why
        row.basis = f"{entry.origin}; {row.basis}" if row.basis else entry.origin
    if entry.job is not None:
        row.projected_s = round(entry.job.wall_s, 1)
        row.tail_share = round(entry.job.tail_share, 4)
        row.gpu_hours = round(entry.job.gpu_hours, 3)
    return row


def write_best(result: BenchResult, path: Path) -> Spec:
    """The winning variant's spec as TOML at `path`, never over an existing file."""
    if result.winner is None:
        raise UserError(
            "there is no winner to write: " + (result.verdict or "no variant was measured"),
            field="--write",
            fix="see the table for why each variant did not run",
        )
    best = result.specs[result.winner].model_copy(update={"name": result.spec.name})
    if not Path(best.model.path).expanduser().is_absolute() and best.model_dir().exists():
        # a relative path means the spec's own folder: written elsewhere it must still find the model
        model = best.model.model_copy(update={"path": str(best.model_dir().resolve())})
        best = best.model_copy(update={"model": model})
    alone = [note for note in result.notes if "nothing was compared" in note]
    with new_write_target(path) as handle:
        handle.write("".join(f"# specpilot bench: {note}\n" for note in alone) + spec_to_toml(best))
    return best


@contextlib.contextmanager
def new_write_target(path: Path) -> Iterator[TextIO]:
    """`--write`'s file, created (never over an existing one): one line naming the field else."""
    try:
        handle = path.open("x", encoding="utf-8")
    except FileExistsError:
        raise UserError(f"{path} exists", field="--write", fix="choose a new file name") from None
    except OSError as err:
        raise UserError(
            f"cannot write {path}: {err.strerror}", field="--write", fix="choose a writable path"
        ) from None
    with handle:
        yield handle
