"""`specpilot job`: check -> plan -> bench -> up -> generate -> export -> down, resumable.

`prepare` refuses bad input before anything starts or is written. `run_job` runs the rest in
the command's one event loop: `run_before_serving`, the stages that start no server of the
job's own (check, plan, bench: bench starts and stops its own variants), then `serve`, with
the healer beside generate. Each stage records in job.json what it decided and why, when it ran
and the GPU-hours it held; a finished stage is never run again (its evidence is reused).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specpilot.errors import EXIT_FAILED, EXIT_INTERRUPTED, JobFailed, UserError
from specpilot.job.lock import JobLock
from specpilot.job.record import JobRecord, exports_of, open_record, pin_prompts, refuse_changes
from specpilot.job.schema import STAGES
from specpilot.job.spec import JobFile, in_job_terms, job_terms
from specpilot.spec import Spec, load_spec

if TYPE_CHECKING:
    from specpilot.check.resolved import ResolvedSpec
    from specpilot.export.run import ExportResult
    from specpilot.generate.dispatch.endpoints import Endpoint
    from specpilot.generate.job import JobWatcher, Outcome
    from specpilot.generate.ledger.report import JobSummary
    from specpilot.generate.yields import Budget
    from specpilot.launch.server_plan import ServerPlan, ServerPlanRecord

Say = Callable[[str], None]
#: the winning bench variant's spec, in the job folder: what `up` starts after a bench
BEST_SPEC = "best.toml"
#: seconds between the live projection's lines while generate runs
PROJECTION_EVERY_S = 30.0
#: how often generate's stage notes in job.json that it still runs (what a kill's attempt counts to)
HEARTBEAT_S = 30.0
#: what to do when an export fails the train-ready check (the exports are written)
UNTRAINABLE_FIX = (
    "the exports are written; check the model's chat template and the engine's reasoning parser, then "
    "generate again, or take an export as it is with `specpilot export {output} --format F --overwrite "
    "--no-train-check`"
)


@dataclass
class JobResult:
    job: JobFile
    record: JobRecord
    exit_code: int = 0
    message: str = ""
    lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        from specpilot.secrets import mask_tree

        stages = mask_tree({s: self.record.stage(s) for s in STAGES}, self.record.secrets)
        return {
            "job_file": str(self.job.path),
            "output": str(self.job.output),
            "exit_code": self.exit_code,
            "message": self.message,
            "stages": stages,
            "restarts": mask_tree(self.record.data.get("restarts", []), self.record.secrets),
            "projection": self.record.data.get("projection"),
            "gpu_hours": self.record.gpu_hours(),
            "max_tokens": self.record.data.get("max_tokens"),
            "yield": self.record.data.get("yield"),
            "yield_guard": self.record.data.get("yield_guard"),
            "gpu_hours_wasted_share": self.record.data.get("gpu_hours_wasted_share"),
            "gpu_hours_wasted": self.record.data.get("gpu_hours_wasted"),
        }


# -- secrets ------------------------------------------------------------------------


def _serving_specs(job: JobFile) -> list[Spec]:
    if job.fleet is not None:
        from specpilot.fleet.spec import load_fleet

        return [m.spec for m in load_fleet(job.fleet).members]
    return [load_spec(job.serving_file)]


def job_secrets(job: JobFile) -> list[str]:
    """Every secret value the job's server specs hold (a secret flag's value, a URL's password,
    a credential in the env): masked in job.json, in every line the job prints and in what it
    raises, and replaced where an answer echoes one."""
    from specpilot.secrets import secret_values

    found = {v for spec in _serving_specs(job) for v in secret_values(spec.engine.env, spec.engine.args)}
    return sorted(found, key=len, reverse=True)


def _masked(say: Say, secrets: list[str]) -> Say:
    from specpilot.secrets import mask_log_text

    return lambda line: say(mask_log_text(line, secrets))


# -- before anything starts -------------------------------------------------------


def _server_spec(job: JobFile) -> Spec:
    spec = load_spec(job.serving_file)
    from specpilot.launch.state import check_run_name

    check_run_name(spec.name, field=f"{job.serving_file}: name")
    return spec


def _check_bench(job: JobFile, spec: Spec) -> None:
    """A bench section must have two variants to compare."""
    from specpilot.bench.variants import default_variants, parse_variants
    from specpilot.check.resolved import release_of

    assert job.bench is not None
    release = release_of(spec)
    chosen = (
        parse_variants(job.bench.variants, release.engine)
        if job.bench.variants
        else default_variants(spec, release)
    )
    if len(chosen) < 2:
        raise UserError(
            "the server spec turns on no speculative method, so a bench has one variant and nothing "
            "to compare",
            field="[job.bench]",
            fix='give variants = "plain,METHOD:1,METHOD:2", or drop [job.bench]',
        )


def _refuse_inputs_in_output(job: JobFile, inputs: dict[str, Path]) -> None:
    """The job's outputs never write over its inputs: an input (by its key) at a path the job
    or its generate writes in the job folder (job.json, data/, errors.jsonl, an export) is refused."""
    from specpilot.export.formats import FORMATS
    from specpilot.export.target import JOB_FOLDER_NAMES
    from specpilot.generate.rows.inputs import as_written, written_by_output

    names = JOB_FOLDER_NAMES | {f.default_name for f in FORMATS.values()}
    for key, path in inputs.items():
        written = written_by_output(path, job.output, names)
        if written is not None:
            raise UserError(
                f"{as_written(path, written)} is a file the job writes in its folder {job.output}: it "
                "would be overwritten",
                field=key,
                fix="keep the job's inputs outside the files it writes (copy it elsewhere), or give "
                "the job another [job] output",
            )


def _prompts_listed(job: JobFile) -> bool:
    """Whether generate has listed the prompts into the folder's ledger (it refuses a changed
    input itself from then on): a rerun does not read them whole again."""
    import sqlite3

    from specpilot.generate.ledger.store import LEDGER_FILE, Ledger

    if not (job.output / LEDGER_FILE).is_file():
        return False
    try:
        ledger = Ledger.in_dir(job.output, readonly=True)
    except (sqlite3.Error, OSError):
        return False  # read them again: generate names the damaged ledger itself
    try:
        return ledger.is_initialized()
    except sqlite3.Error:
        return False
    finally:
        ledger.close()


def prepare(job: JobFile, restart_from: str | None) -> JobRecord:
    """Every refusal before the job starts anything or writes into its folder: the prompts'
    content included (read whole, streaming), as generate would refuse them."""
    if restart_from is not None and restart_from not in STAGES:
        raise UserError(
            f"unknown stage {restart_from!r}", field="--restart-from", fix=f"use one of {', '.join(STAGES)}"
        )
    if job.fleet is not None:
        from specpilot.fleet.spec import load_fleet

        fleet = load_fleet(job.fleet)
        if job.bench is not None:
            raise UserError(
                "bench measures one server spec, not a fleet",
                field="[job.bench]",
                fix="bench the fleet's server spec in a job of its own, or drop [job.bench]",
            )
        spec = fleet.server
        inputs = {"[job] fleet": job.serving_file}
        if spec.source_path is not None:
            inputs["[job] fleet (its server spec)"] = spec.source_path
    else:
        inputs = {"[job] server": job.serving_file}
        spec = _server_spec(job)
        if job.bench is not None:
            _check_bench(job, spec)
    if job.output.exists() and not job.output.is_dir():
        raise UserError(f"{job.output} is a file", field="[job] output", fix="give a folder")
    _refuse_inputs_in_output(job, {"[job] prompts": job.prompts, "the job file": job.path, **inputs})
    with job_terms():  # the prompts read as generate reads them
        record, changed = open_record(job)
    record.secrets = job_secrets(job)
    if job.retry_truncated:
        changed = _check_retry(job, record, changed)
    refuse_changes(record, changed, restart_from)
    if not _prompts_listed(job):
        from specpilot.job.prompts import check_prompts

        check_prompts(job.prompts)
    if restart_from is not None:
        record.reset_from(restart_from)
    down = record.data.get("stages", {}).get("down", {})  # read only: stage() would add it
    if not job.keep_servers and down.get("status") == "skipped" and (down.get("evidence") or {}).get("kept"):
        # kept by an earlier run; --stop-servers now: this run's down stops them
        record.data["stages"]["down"] = {"status": "pending"}
    if job.retry_truncated and record.done("generate"):
        record.reset_from("generate")  # every row was done: the cut ones are sent again
    return record


def _check_retry(job: JobFile, record: JobRecord, changed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """--retry-truncated: a job with rows, a budget larger than the one its rows were cut at;
    the inputs that changed, less a max_tokens it allows to grow."""
    import json

    from specpilot.generate.job import RETRY_FROM_KEY
    from specpilot.generate.ledger.report import reading_ledger
    from specpilot.generate.ledger.store import LEDGER_FILE
    from specpilot.generate.writers.truncated import check_budget

    if not (job.output / LEDGER_FILE).exists():
        raise UserError(
            f"{job.output} holds no generated rows yet: no truncated rows to retry",
            field="--retry-truncated",
            fix="drop it (pass it when rerunning a job whose rows were cut at max_tokens)",
        )
    with reading_ledger(job.output) as ledger:
        meta = ledger.meta()
    wanted = None if job.max_tokens_auto else job.sampling.max_tokens
    resumed = RETRY_FROM_KEY in meta and meta.get("max_tokens") == json.dumps(wanted)
    check_budget(json.loads(meta[RETRY_FROM_KEY] if resumed else meta.get("max_tokens", "null")), wanted)
    before = dict(record.data.get("job", {}).get("sampling") or {})
    now = job.options_json()["sampling"]
    if {**before, "max_tokens": None} == {**now, "max_tokens": None}:
        return [(key, restart) for key, restart in changed if key != "sampling"]
    return changed


def hold_folder(job: JobFile) -> JobLock | None:
    """The job folder's lock, taken before anything is read where a job began (None: none did;
    `begin` takes it): a second command on a running job is refused at once."""
    from specpilot.job.lock import LOCK_FILE

    return JobLock(job.output) if (job.output / LOCK_FILE).is_file() else None


def begin(job: JobFile, record: JobRecord, lock: JobLock | None = None) -> JobLock:
    """The job folder, its lock (`lock`, or taken here) and its record, once every check passed."""
    from specpilot.job.record import make_folder

    make_folder(job.output)
    lock = lock or JobLock(job.output)
    try:
        _save_begun(job, record)
    except BaseException:
        lock.release()
        raise
    return lock


def _save_begun(job: JobFile, record: JobRecord) -> None:
    from specpilot.job.record import input_hashes

    before = (record.data.get("inputs") or {}).get("prompts") or {}
    record.data["inputs"] = input_hashes(job)
    if before.get("fingerprint") == record.data["inputs"]["prompts"]["fingerprint"]:
        # the same file: its hash as the job first read it (prepare refused a changed one)
        record.data["inputs"]["prompts"]["sha256"] = before.get("sha256")
    pin_prompts(record, job)
    record.data["job"] = {
        "server": str(job.server) if job.server else None,
        "fleet": str(job.fleet) if job.fleet else None,
        "prompts": str(job.prompts),
        "keep_servers": job.keep_servers,
        "max_restarts": job.max_restarts,
        "concurrency": job.concurrency,
        "stall_after_s": job.stall_after_s,
        "give_up_after_s": job.give_up_after_s,
        **job.options_json(),
    }
    record.save()


# -- check, plan, bench -------------------------------------------------------------


def _gpus_of(job: JobFile) -> int:
    """The GPUs the job's servers hold while they run."""
    if job.fleet is not None:
        from specpilot.fleet.spec import load_fleet

        return sum(m.spec.gpu.count for m in load_fleet(job.fleet).members)
    return load_spec(job.serving_file).gpu.count


async def _check_and_plan(job: JobFile, record: JobRecord, say: Say) -> dict[object, ServerPlan]:
    """The check and plan stages (each skipped when finished); the servers they planned, by
    their kind of GPU ({} when both were finished: nothing was resolved)."""
    from specpilot.check.resolved import resolve
    from specpilot.launch.server_plan import server_plan
    from specpilot.models.host_files import read_model

    specs = _specs_by_gpu(job)
    if record.done("plan") and not _plans_readable(record):
        # the plan is cheap and the ledger holds the rows: a job begun by an older specpilot
        # goes on with a plan of this one instead of stopping a resume of days
        record.reopen("plan")
        say("plan: job.json's plan was recorded by another specpilot release; planning again")
    # each server spec resolved once (its model read, its release looked up, its flags
    # evaluated) for both stages and for what starts it
    settled = record.done("check") and record.done("plan")
    resolved: dict[object, ResolvedSpec] = {}
    if not settled:
        resolved = {key: resolve(s, await read_model(s)) for key, s in specs.items()}
    if not record.done("check"):
        _check_stage(job, record, resolved, say)
    servers = {key: server_plan(r) for key, r in resolved.items()}
    if not record.done("plan"):
        _plan_stage(job, record, servers, say)
    if job.max_tokens_auto and context_tokens(record) is None:
        raise UserError(
            "auto needs the servers' context to bound it, and neither the server spec's flags "
            "(--context-length, --max-model-len) nor the model's config.json say it",
            field="[job.sampling] max_tokens",
            fix="set the context in the server spec (e.g. --context-length 32768), or give a number",
        )
    return servers


def _specs_by_gpu(job: JobFile) -> dict[object, Spec]:
    """The job's server specs, one per kind of GPU (a fleet's members by their GPU key)."""
    if job.fleet is not None:
        from specpilot.fleet.spec import load_fleet

        return {m.gpu_key: m.spec for m in load_fleet(job.fleet).members}
    spec = _server_spec(job)
    return {(spec.gpu.memory_gib, spec.gpu.name, spec.gpu.count): spec}


def _check_stage(job: JobFile, record: JobRecord, resolved: dict[object, ResolvedSpec], say: Say) -> None:
    """The check stage: every spec's findings recorded; the first error fails the job."""
    record.begin("check", 0)
    found = {str(key): [dataclasses.asdict(f) for f in r.check.findings] for key, r in resolved.items()}
    errors = [f"{f['rule']}: {f['message']}" for fs in found.values() for f in fs if f["severity"] == "error"]
    if errors:
        record.fail("check", errors[0])
        raise JobFailed(
            f"check refused the server spec: {errors[0]} (see `specpilot check {job.serving_file}`)"
        )
    record.finish("check", {"findings": found})
    say(f"check: {sum(len(f) for f in found.values())} findings, none refuses the start")


def _plan_stage(job: JobFile, record: JobRecord, servers: dict[object, ServerPlan], say: Say) -> None:
    """The plan stage: every server's plan recorded (`ServerPlan.to_json`, with its context);
    one that does not fit fails the job."""
    record.begin("plan", 0)
    recommended: list[str] = []
    for server in servers.values():
        plan = server.plan
        problems = [p.message for p in plan.problems] if plan is not None else list(server.preflight.errors)
        if plan is None or not plan.fits:
            record.fail("plan", problems[0] if problems else "does not fit")
            raise JobFailed(
                f"the plan does not fit: {'; '.join(problems)} (see `specpilot plan {job.serving_file}`)"
            )
        recommended += [" ".join(plan.recommended_args)] if plan.recommended_args else []
    record.finish("plan", {"plans": {str(key): server.to_json() for key, server in servers.items()}})
    say("plan: fits" + "".join(f"; recommends {r}" for r in recommended))


def recorded_plans(record: JobRecord) -> list[ServerPlanRecord]:
    """The server plans the plan stage recorded, read back typed (`_check_and_plan` plans again
    where they are not of this specpilot)."""
    from specpilot.launch.server_plan import ServerPlanRecord

    plans = (record.stage("plan").get("evidence") or {}).get("plans") or {}
    return [ServerPlanRecord.from_json(data) for data in plans.values()]


def _plans_readable(record: JobRecord) -> bool:
    """The plan stage's record holds server plans this specpilot reads."""
    try:
        recorded_plans(record)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return True


def context_tokens(record: JobRecord) -> int | None:
    """The servers' context in tokens (the least of a fleet's), as the plan stage found it:
    what bounds max_tokens (None: not known)."""
    contexts = [plan.context_tokens for plan in recorded_plans(record)]
    return None if None in contexts or not contexts else min(c for c in contexts if c is not None)


async def _bench(job: JobFile, record: JobRecord, say: Say, planned: ServerPlan | None) -> ServerPlan | None:
    """The bench stage (skipped when finished or not asked for); the server its winner starts
    as (planned from `planned`, the server spec's, without reading the model again), else
    `planned` as it is."""
    if record.done("bench"):
        return planned
    if job.bench is None:
        record.finish("bench", {"why": "no [job.bench] in the job file"}, status="skipped")
        return planned
    from specpilot.bench.finish import finish_bench
    from specpilot.bench.run import BenchRequest, plan_settings, run_bench
    from specpilot.bench.variants import default_variants, parse_variants
    from specpilot.check.resolved import release_of

    spec = _server_spec(job)
    bench = job.bench
    record.begin("bench", spec.gpu.count)
    release = release_of(spec)
    chosen = (
        parse_variants(bench.variants, release.engine) if bench.variants else default_variants(spec, release)
    )
    settings = plan_settings(
        job.output, sample_rows=bench.sample, sampling=job.sampling, budget_s=bench.budget_s,
        warmup_s=min(30.0, bench.budget_s / 4), progress_interval_s=0.0,
    )  # fmt: skip
    request = BenchRequest(spec, release, job.prompts, job.output, chosen, bench.sample, 0, settings)
    result = await run_bench(request, say)
    best = job.output / BEST_SPEC
    if result.winner is not None:
        best.unlink(missing_ok=True)  # a bench run again writes its own winner
    if finish_bench(result, request, best).best_path is None:
        why = result.verdict or "no variant could be measured"
        record.fail("bench", why)
        raise JobFailed(f"bench: {why} (see {job.output / 'bench.json'})")
    # the server `up` starts: the winner's, recorded as the plan stage records the server spec's
    winner = await _planned(planned, load_spec(best))
    record.finish(
        "bench",
        {
            "winner": result.winner,
            "spec": str(best),
            "table": result.data.get("variants", []),
            "server_plan": winner.to_json(),
        },
    )
    say(f"bench: {result.winner} wins; the job starts it ({best})")
    return winner


async def _planned(planned: ServerPlan | None, spec: Spec) -> ServerPlan:
    """`spec` as a server: planned from `planned` (this command's resolution of the server spec:
    the model is not read again), else planned here (the model read once)."""
    from specpilot.launch.server_plan import plan_server

    return planned.respec(spec) if planned is not None else await plan_server(spec)


async def run_before_serving(job: JobFile, record: JobRecord, say: Say) -> ServerPlan | None:
    """check, plan and bench (each skipped when finished); then the projection at start. The
    server `up` starts, where these stages planned it (None: a fleet, or nothing was planned)."""
    servers = await _check_and_plan(job, record, say)
    planned = next(iter(servers.values())) if job.server is not None and servers else None
    with job_terms():
        planned = await _bench(job, record, say, planned)
    _max_tokens(job, record, say)
    from specpilot.job.cost import projection_at_start

    projection = projection_at_start(job, _gpus_of(job))
    if projection is not None:
        record.data["projection"] = projection.to_json()
        record.save()
        say(f"projected for the whole input: {projection.line()}")
    else:
        say("projected: not yet (no bench); the live projection follows once rows finish")
    return planned


def _bench_budget(job: JobFile, record: JobRecord) -> tuple[Budget, list[int]] | None:
    """What the bench's sample says of max_tokens: its answers' lengths (cut at the max_tokens
    the bench asked with, if any) and the one covering their p99 within the context, with the
    lengths; None
    without a bench result with lengths. The longest prompt is bounded by its characters (a
    token holds at least one)."""
    import json

    from specpilot.generate.yields import TEMPLATE_TOKENS, propose_budget
    from specpilot.projection import BENCH_FILE

    path = job.output / BENCH_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        lengths = [int(n) for n in data.get("output_lengths") or ()]
        asked = data.get("sampling", {}).get("max_tokens")
        prompt_chars = max((int(n) for n in data.get("sample", {}).get("prompt_chars") or ()), default=0)
    except (OSError, ValueError, TypeError, AttributeError):
        return None  # `read_bench` names a damaged one where the projection reads it
    if not lengths:
        return None
    budget = propose_budget(
        lengths, int(asked) if asked else None, context_tokens(record), prompt_chars + TEMPLATE_TOKENS
    )
    return budget, lengths


def _max_tokens(job: JobFile, record: JobRecord, say: Say) -> None:
    """max_tokens from evidence: what the bench's answers say of the job's max_tokens (the share
    of rows it expects cut) and, with max_tokens = "auto", the one the job uses (job.json's
    `max_tokens`, decided once: a rerun keeps it)."""
    decided = record.data.get("max_tokens")
    if job.max_tokens_auto and isinstance(decided, dict) and decided.get("auto"):
        return
    found = _bench_budget(job, record)
    budget, lengths = found if found is not None else (None, [])
    configured = job.sampling.max_tokens
    entry: dict[str, Any] = {
        "auto": job.max_tokens_auto,
        "evidence": None if budget is None else budget.to_json(),
    }
    if budget is not None:
        said = f"max_tokens: the bench's {budget.lengths_text()}"
        if configured is not None:
            cut = sum(1 for n in lengths if n >= configured)
            entry["expected_cut_share"] = round(cut / budget.answers, 4)
            said += (
                f"; at max_tokens {configured:,} about {cut / budget.answers:.1%} of rows are expected cut"
            )
        if budget.proposed is not None:
            said += f"; {budget.proposed:,} {budget.covers_text()} ({budget.room_text()})"
        say(said)
    if job.max_tokens_auto:
        value = None if budget is None else budget.proposed
        entry.update(
            value=value,
            why="p99 of the bench's answers, within the context"
            if budget is not None
            else "no bench: the server's own limit (the context less each prompt); the yield guard's "
            "first rows measure the lengths",
        )
        say(f"max_tokens = auto: {value if value is not None else 'the server limit (no bench)'}")
    else:
        entry["value"] = configured
    record.data["max_tokens"] = entry
    record.save()


def serving_spec(job: JobFile, record: JobRecord) -> Spec:
    """The spec `up` starts: the bench's winner when there was a bench, with the bounds the
    healer applied since (recorded as the server's args)."""
    best = record.stage("bench").get("evidence", {}).get("spec")
    spec = load_spec(Path(best)) if best else _server_spec(job)
    args = record.data.get("server_args")
    if args is not None:
        from specpilot.secrets import unmask_argv

        # job.json holds them masked: each secret value is the spec's own
        args = unmask_argv(list(args), list(spec.engine.args))
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": args})})
    return spec


# -- up, generate, export, down: one event loop ----------------------------------------


async def _up_server(job: JobFile, record: JobRecord, say: Say, planned: ServerPlan | None) -> ServerPlan:
    """The job's server, started (or the one it started, still serving, reused): the server
    `planned` by the stages before, for the spec `up` starts (`serving_spec`)."""
    from specpilot.job.serve import Started, clear_run, recorded_run_serving, start
    from specpilot.launch.preflight import argv_secret_warnings
    from specpilot.launch.state import start_lock

    spec = serving_spec(job, record)
    server = await _planned(planned, spec)
    for warning in argv_secret_warnings(server.started, server.release):  # as `up` warns
        say(f"warning: {warning}")
    recorded = record.stage("up").get("evidence")
    if record.done("up") and recorded is not None and await recorded_run_serving(spec.name, recorded):
        say(f"up: {spec.name} is still serving as this job started it (pid {recorded['pid']}); reusing it")
        return server
    if record.done("up"):
        say(f"up: {spec.name} is no longer serving; starting it again")
    stage = record.stage("up")
    # a start this job began and a kill interrupted: its run is the job's own to stop
    interrupted = stage.get("started_at") if stage.get("status") == "running" else None
    record.begin("up", _gpus_of(job))
    with start_lock(spec.name):  # a `specpilot up` of the same name meanwhile is refused, or refuses this
        await clear_run(spec.name, recorded, say, ours_since=interrupted)
        started: Started = await start(server, say)
    if started.result.phase != "ready":
        why = (started.result.error or "").strip().splitlines()[-1:] or [""]
        record.stage("up")["replans"] = started.replans or []
        record.fail("up", f"{started.result.cause}: {why[0]}")
        raise JobFailed(
            f"up: {spec.name} {started.result.phase} ({started.result.cause}): {why[0]} "
            f"(see `specpilot logs {spec.name}`; fix it, then run the same command)"
        )
    if started.spec.engine.args != spec.engine.args:
        record.data["server_args"] = list(started.spec.engine.args)
    record.finish("up", started.evidence())
    ready = started.result
    say(f"up: {spec.name} ready at {ready.endpoint} (pid {ready.pid}; argv and env verified)")
    return started.server


async def _up_fleet(job: JobFile, record: JobRecord, say: Say) -> str:
    from specpilot.fleet.ops import router_running
    from specpilot.fleet.spec import load_fleet
    from specpilot.fleet.state import fleet_path, read_fleet
    from specpilot.fleet.up import fleet_up

    fleet = load_fleet(job.serving_file)
    if record.done("up") and fleet_path(fleet.name).exists() and await router_running(read_fleet(fleet.name)):
        say(f"up: fleet {fleet.name} is still up as this job started it; reusing it")
        return fleet.name
    record.begin("up", _gpus_of(job))
    outcome = await fleet_up(fleet, say)
    if not outcome.registered:
        record.fail("up", "no member became ready")
        raise JobFailed(
            f"up: no member of fleet {fleet.name} became ready (see `specpilot status {fleet.name}`)"
        )
    record.finish(
        "up",
        {
            "fleet": fleet.name,
            "router_url": outcome.router_url,
            "members": [m.to_json() for m in outcome.members],
        },
    )
    members = f"{outcome.registered} of {len(outcome.members)} members"
    say(f"up: fleet {fleet.name}: {members} behind {outcome.router_url}")
    return fleet.name


async def _generate(
    job: JobFile, record: JobRecord, served: str, server: ServerPlan | None, say: Say
) -> tuple[int, str]:
    from specpilot.generate.eta import all_of, projecting
    from specpilot.generate.job import JobConfig, generate_in_loop

    endpoints, heal, api_key = _endpoints_and_healer(job, record, served, server, say)
    decided = record.data.get("max_tokens") or {}
    sampling = job.sampling
    if job.max_tokens_auto:
        sampling = dataclasses.replace(sampling, max_tokens=decided.get("value"))
    config = JobConfig(
        input_path=job.prompts, output_dir=job.output, endpoints=endpoints, model=None, sampling=sampling,
        concurrency=job.concurrency, notify=say, progress_interval_s=PROJECTION_EVERY_S,
        stall_after_s=job.stall_after_s, give_up_after_s=job.give_up_after_s, api_key=api_key,
        secrets=tuple(record.secrets),
        retry_truncated=job.retry_truncated, yield_floor=job.yield_floor,
        context_tokens=context_tokens(record), in_job=True,
    )  # fmt: skip
    record.begin("generate", _gpus_of(job))
    from specpilot.job.cost import heartbeat

    watchers = [
        heal,
        projecting(job.output, PROJECTION_EVERY_S, say),
        heartbeat(record, "generate", HEARTBEAT_S),
    ]
    outcome = await generate_in_loop(config, all_of(watchers))
    return _record_generate(job, record, outcome, say)


def _endpoints_and_healer(
    job: JobFile, record: JobRecord, served: str, server: ServerPlan | None, say: Say
) -> tuple[list[Endpoint], JobWatcher, str | None]:
    """Where generate sends (the server, or the fleet's routers), what mends a death, and the key."""
    from specpilot.generate.dispatch.endpoints import Endpoint, endpoints_of_fleet, normalize_url
    from specpilot.job.heal import ServerHealer, fleet_healer
    from specpilot.launch.command import api_key_of
    from specpilot.launch.state import read_state

    if server is not None:
        state = read_state(served)
        # no run name: a death is the healer's to mend, not a reason for generate to stop
        endpoints = [Endpoint(normalize_url(state.endpoint), state.served_model_name or None)]
        healer = ServerHealer(server, record, job.max_restarts, say).watcher()
        return endpoints, healer, api_key_of(server.spec, server.release.engine)
    # a fleet's router takes no key of the members'
    return endpoints_of_fleet(served), fleet_healer(served, record, job.max_restarts, say), None


def _record_generate(job: JobFile, record: JobRecord, outcome: Outcome, say: Say) -> tuple[int, str]:
    """The generate stage's evidence, stalls and yield in job.json; its exit code and failure."""
    summary = outcome.summary
    evidence = {
        "rows_total": summary.total, "rows_done": summary.done, "clean": summary.clean,
        "flagged": summary.flagged, "failed": summary.failed, "by_cause": summary.by_cause,
        "completion_tokens": summary.completion_tokens,
        "flagged_completion_tokens": summary.flagged_completion_tokens, "message": outcome.message,
    }  # fmt: skip
    stage = record.stage("generate")
    stage["stalled_s"] = round(float(stage.get("stalled_s", 0.0)) + outcome.stalled_s, 3)
    record.data["yield"] = _yield(job, summary)
    if outcome.yield_stop is not None:
        record.data["yield_guard"] = {**outcome.yield_stop, "at": time.time()}
    else:
        record.data.pop("yield_guard", None)
    if outcome.exit_code != 0:
        record.stage("generate").update(evidence=evidence)
        record.fail("generate", outcome.message)
        code = EXIT_INTERRUPTED if outcome.signalled else outcome.exit_code
        return code, f"generate: {outcome.message}"
    record.finish("generate", evidence)
    say(f"generate: {outcome.message}")
    return 0, ""


def _yield(job: JobFile, summary: JobSummary) -> dict[str, Any]:
    """job.json's `yield`: rows clean, flagged by cause, failed, against the floor."""
    share = summary.clean_share
    return {
        "rows_total": summary.total,
        "done": summary.done,
        "clean": summary.clean,
        "flagged": summary.flagged,
        "failed": summary.failed,
        "by_cause": summary.by_cause,
        "clean_share": None if share is None else round(share, 4),
        **job.yield_floor.to_json(),
    }


def _export(job: JobFile, record: JobRecord, say: Say) -> str:
    """Every format of `[job] export`; "" or, when a format fails the train-ready check (all
    formats are written still), why the job fails."""
    stage = record.stage("export")
    untrainable: list[str] = []
    written: dict[str, Any] = dict(stage.get("formats", {}))
    record.begin("export", _gpus_of(job))  # the servers run until down
    tokenizer = _model_folder(job, record) if job.train_check else None
    skip = None if job.train_check else "[job] train_check = false"
    for fmt in job.export:
        if fmt in written and not written[fmt].get("train_ready", {}).get("mismatches"):
            continue
        template, warnings, result = _export_format(job, record, fmt, tokenizer, skip)
        warnings += result.warnings
        written[fmt] = {
            "rows": result.rows,
            "files": [str(f) for f in result.files],
            "chat_template": template,
            "warnings": warnings,
            "train_ready": result.train_ready.to_json(),
        }
        stage["formats"] = written  # a kill between formats keeps those done
        record.save()
        _say_exported(fmt, result, template, warnings, say)
        # written, but a drafter trained on it learns text the model never wrote
        if result.train_ready.failed:
            untrainable.append(f"export {fmt}: {result.train_ready.line()}")
    left_out = _flagged_left_out(job, record, say)
    evidence = {"formats": written, "flagged_left_out": left_out}
    if untrainable:
        why = "; ".join(untrainable) + f" ({UNTRAINABLE_FIX.format(output=job.output)})"
        stage["evidence"] = evidence
        record.fail("export", why)
        return why
    record.finish("export", evidence)
    if "yield" in record.data:  # no partial `yield` where a hand edit took it out (job.json's shape)
        record.data["yield"]["exports"] = exports_of(record.data)
        record.save()
    return ""


def _export_format(
    job: JobFile, record: JobRecord, fmt: str, tokenizer: Path | None, skip: str | None
) -> tuple[str | None, list[str], ExportResult]:
    """One format written, with the chat template it states and its warnings; a refusal fails
    the stage (the job failed here, not its input)."""
    from specpilot.export.formats import format_named
    from specpilot.export.run import chat_template, export
    from specpilot.generate.ledger.report import reading_ledger

    try:
        with reading_ledger(job.output) as ledger:
            model = ledger.meta().get("model")
        # the template `export` states (or warns it knows none for the model)
        template, warnings = chat_template(format_named(fmt, field="[job] export"), None, model)
        result = export(
            job.output, fmt, None, include_flagged=job.include_flagged, per_turn=True, overwrite=True,
            tokenizer=tokenizer, skip_train_check=skip,
        )  # fmt: skip
    except UserError as err:  # e.g. every row flagged: the job failed here, not its input
        refused = in_job_terms(err)
        record.fail("export", str(refused))
        raise JobFailed(f"export {fmt}: {refused}") from None
    return template, warnings, result


def _say_exported(
    fmt: str, result: ExportResult, template: str | None, warnings: list[str], say: Say
) -> None:
    """Where the format went, the template to train with, its warnings and its train-ready line."""
    where = result.files[0] if len(result.files) == 1 else result.files[0].parent
    say(f"export: {result.rows} rows as {fmt} to {where}")
    if template is not None:
        say(f"export: train with chat template {template} (SpecForge: --chat-template {template})")
    for warning in warnings:
        say(f"export: warning: {warning}")
    say(f"export {fmt}: {result.train_ready.line()}")


def _flagged_left_out(job: JobFile, record: JobRecord, say: Say) -> int:
    """How many flagged rows the exports leave out (0 with include_flagged)."""
    flagged = int(record.stage("generate").get("evidence", {}).get("flagged") or 0)
    left_out = 0 if job.include_flagged else flagged
    if left_out:
        # nothing silent: a dataset smaller than the rows generated says why
        say(
            f"export: {left_out:,} flagged rows left out (see `specpilot report {job.output}` for why "
            "each was flagged); [job] include_flagged = true keeps them"
        )
    return left_out


def _model_folder(job: JobFile, record: JobRecord) -> Path | None:
    """The served model's folder when it is on this machine (the train-ready check reads its
    tokenizer there); None: the check looks at the job's served model name instead."""
    from specpilot.export.tokenizer import is_tokenizer_folder

    if job.server is None:
        return None
    spec = serving_spec(job, record)
    folder = spec.model_dir()
    return folder if spec.host.target == "local" and is_tokenizer_folder(folder) else None


async def _down(job: JobFile, record: JobRecord, served: str | None, fleet: bool, say: Say) -> None:
    if job.keep_servers:
        record.finish("down", {"kept": served}, status="skipped")
        say(f"down: {served} kept running ([job] keep_servers); stop it with `specpilot down {served}`")
        return
    record.begin("down", _gpus_of(job))
    if served is None:
        record.finish("down", {"stopped": None})
        return
    if fleet:
        from specpilot.fleet.ops import fleet_down

        result = await fleet_down(served)
    else:
        from specpilot.job.serve import job_started, left_after_down
        from specpilot.launch.ops import run_down

        if not job_started(served, record.stage("up")):  # stopped since (a kept one, by hand)
            record.finish("down", {"stopped": None, "why": f"{served} is not running as this job started it"})
            say(f"down: {served} is not running as this job started it; nothing to stop")
            return
        result = await run_down(served, timeout_s=30.0)
        left = left_after_down(served, result)
        if left:  # not "stopped": a process survived, or the record names one not provably the run's
            record.finish("down", {"stopped": None, "left": left, "result": result})
            say(f"down: {'; '.join(left)}")
            return
    record.finish("down", {"stopped": served, "result": result})
    say(f"down: {served} {_stop_said(result)}")


def _stop_said(result: dict[str, Any]) -> str:
    """What a stop did, as `down` says it ("was not running": a run an earlier attempt stopped)."""
    from specpilot.launch.stop import STOP_OUTCOMES

    outcome = str(result.get("stopped", "terminated"))
    return STOP_OUTCOMES.get(outcome, outcome).replace("PGID", str(result.get("pid")))


async def stop_short(job: JobFile, record: JobRecord, say: Say) -> list[str]:
    """The job stopped before its down stage (a refusal, a failure, a signal, a full disk):
    what it started is stopped, unless keep_servers. A line for each thing left running."""
    up = record.data.get("stages", {}).get("up", {})  # read only: stage() would add it
    if job.keep_servers or record.done("down") or up.get("status", "pending") == "pending":
        return []
    if job.fleet is not None:
        from specpilot.fleet.ops import fleet_down
        from specpilot.fleet.spec import load_fleet
        from specpilot.fleet.state import fleet_path
        from specpilot.launch.shield import signals_blocked, wait_for_children

        name = load_fleet(job.fleet).name
        if not fleet_path(name).exists():
            return []
        with signals_blocked():
            await wait_for_children()
            await fleet_down(name)
        say(f"down: fleet {name} stopped (the job stopped before its end)")
        return []
    from specpilot.job.serve import job_started, stop_own

    name = _served_name(job, record) or serving_spec(job, record).name
    if not job_started(name, up):
        return []
    left = await stop_own(name, up)
    if not left:
        say(f"down: {name} stopped (the job stopped before its end; the same command starts it again)")
    return left


def _served_name(job: JobFile, record: JobRecord) -> str | None:
    evidence = record.stage("up").get("evidence") or {}
    name = evidence.get("name") or evidence.get("fleet")
    return str(name) if name else None


async def run_job(job: JobFile, record: JobRecord, say: Say) -> JobResult:
    """Every stage after `prepare` and `begin`, each skipped when finished; no line it prints
    and no failure it raises holds a secret of the job's server specs; however it ends, job.json
    gets the share of its GPU-hours wasted."""
    from specpilot.secrets import mask_log_text

    say = _masked(say, record.secrets)
    for line in record.said:  # what reading the record corrected
        say(line)
    from specpilot.job.cost import record_waste

    try:
        planned = await run_before_serving(job, record, say)
        result = await serve(job, record, say, planned)
    except JobFailed as err:
        raise JobFailed(mask_log_text(str(err), record.secrets)) from None
    finally:
        record_waste(record, job.include_flagged)
    result.message = mask_log_text(result.message, record.secrets)
    return result


async def serve(job: JobFile, record: JobRecord, say: Say, planned: ServerPlan | None = None) -> JobResult:
    """up -> generate -> export -> down, each skipped when finished; `planned`: the server the
    stages before planned (`run_before_serving`), else up plans it."""
    result = JobResult(job, record)
    fleet = job.fleet is not None
    served = _served_name(job, record)
    server: ServerPlan | None = None
    if not record.done("generate"):
        record.reopen("down")  # an earlier attempt stopped what it started; this one starts it again
        if fleet:
            served = await _up_fleet(job, record, say)
        else:
            server = await _up_server(job, record, say, planned)
            served = server.spec.name
        with job_terms():
            code, message = await _generate(job, record, served, server, say)
        if code != 0:
            if not job.keep_servers:
                await _down(job, record, served, fleet, say)
            result.exit_code, result.message = code, message
            return result
    untrainable = ""
    try:
        if not record.done("export"):
            untrainable = _export(job, record, say)
    finally:  # an export that fails (every row flagged) still stops what the job started
        if not record.done("down"):
            await _down(job, record, served, fleet, say)
    failed = untrainable or _under_floor(job, record)
    if failed:
        result.exit_code, result.message = EXIT_FAILED, failed
        return result
    result.message = f"job done: {record.stage('generate').get('evidence', {}).get('message', '')}"
    return result


def _under_floor(job: JobFile, record: JobRecord) -> str | None:
    """No "done" without a dataset: a job whose clean yield is under its floor ends non-zero
    once every row is processed, naming what each export holds."""
    found = record.data.get("yield") or {}
    share = found.get("clean_share")
    if not job.yield_floor.on or share is None or share * 100 >= job.yield_floor.min_clean_pct:
        return None
    exports = ", ".join(f"{fmt} {rows:,} rows" for fmt, rows in exports_of(record.data).items()) or "none"
    guard = record.data.get("yield_guard") or {}
    why = guard.get("message") or (
        f"only {found['clean']:,} of {found['done']:,} rows are clean ({share:.1%}), under the floor of "
        f"{job.yield_floor.min_clean_pct:g}% ([job] min_clean_yield)"
    )
    return f"the dataset is too small to use: {why}; exports written: {exports}"
