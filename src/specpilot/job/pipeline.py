"""`specpilot job`: check -> plan -> bench -> up -> generate -> export -> down, resumable.

`prepare` refuses bad input before anything starts or is written. `run_job` runs the rest in
the command's one event loop: `run_before_serving`, the stages that start no server of the
job's own (check, plan, bench: bench starts and stops its own variants), then `serve`, with
the healer beside generate. Each stage records in job.json what it decided and why, when it ran
and the GPU-hours it held; a finished stage is never run again (its evidence is reused).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specpilot.errors import JobFailed, UserError
from specpilot.job.record import STAGES, JobRecord, open_record, pin_prompts, refuse_changes
from specpilot.job.spec import JobFile
from specpilot.spec import Spec, load_spec

Say = Callable[[str], None]
#: the winning bench variant's spec, in the job folder: what `up` starts after a bench
BEST_SPEC = "best.toml"
#: seconds between the live projection's lines while generate runs
PROJECTION_EVERY_S = 30.0
#: how often generate's stage notes in job.json that it still runs (what a kill's attempt counts to)
HEARTBEAT_S = 30.0


@dataclass
class JobResult:
    job: JobFile
    record: JobRecord
    exit_code: int = 0
    message: str = ""
    lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        stages = {s: self.record.stage(s) for s in STAGES}
        return {
            "job_file": str(self.job.path),
            "output": str(self.job.output),
            "exit_code": self.exit_code,
            "message": self.message,
            "stages": stages,
            "restarts": self.record.data.get("restarts", []),
            "projection": self.record.data.get("projection"),
            "gpu_hours": self.record.gpu_hours(),
        }


# -- before anything starts -------------------------------------------------------


def _server_spec(job: JobFile) -> Spec:
    spec = load_spec(job.serving_file)
    from specpilot.launch.state import check_run_name

    check_run_name(spec.name, field=f"{job.serving_file}: name")
    return spec


def _check_bench(job: JobFile, spec: Spec) -> None:
    """A bench section must have two variants to compare."""
    from specpilot.bench.variants import default_variants, parse_variants

    assert job.bench is not None
    chosen = parse_variants(job.bench.variants, spec) if job.bench.variants else default_variants(spec)
    if len(chosen) < 2:
        raise UserError(
            "the server spec turns on no speculative method, so a bench has one variant and nothing "
            "to compare",
            field="[job.bench]",
            fix='give variants = "plain,METHOD:1,METHOD:2", or drop [job.bench]',
        )


def prepare(job: JobFile, restart_from: str | None) -> JobRecord:
    """Every refusal before the job starts anything or writes into its folder."""
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
    else:
        spec = _server_spec(job)
        if job.bench is not None:
            _check_bench(job, spec)
    if job.output.exists() and not job.output.is_dir():
        raise UserError(f"{job.output} is a file", field="[job] output", fix="give a folder")
    record, changed = open_record(job)
    refuse_changes(record, changed, restart_from)
    if restart_from is not None:
        record.reset_from(restart_from)
    return record


def begin(job: JobFile, record: JobRecord) -> None:
    """The job folder and its record, once every check passed."""
    from specpilot.job.record import input_hashes

    job.output.mkdir(parents=True, exist_ok=True)
    before = record.data.get("inputs", {}).get("prompts", {})
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


async def _check_and_plan(job: JobFile, record: JobRecord, say: Say) -> None:
    from specpilot.check.resolved import ResolvedSpec, resolve
    from specpilot.models.host_files import read_model
    from specpilot.plan import make_plan

    if job.fleet is not None:
        from specpilot.fleet.spec import load_fleet

        specs = {m.gpu_key: m.spec for m in load_fleet(job.fleet).members}
    else:
        spec = _server_spec(job)
        specs = {(spec.gpu.memory_gib, spec.gpu.name, spec.gpu.count): spec}
    # each server spec resolved once (its model read, its flags evaluated) for both stages
    settled = record.done("check") and record.done("plan")
    resolved: dict[object, ResolvedSpec] = {}
    if not settled:
        resolved = {key: resolve(s, await read_model(s)) for key, s in specs.items()}
    if not record.done("check"):
        record.begin("check", 0)
        found = {str(key): [dataclasses.asdict(f) for f in r.check.findings] for key, r in resolved.items()}
        errors = [
            f"{f['rule']}: {f['message']}" for fs in found.values() for f in fs if f["severity"] == "error"
        ]
        if errors:
            record.fail("check", errors[0])
            raise JobFailed(
                f"check refused the server spec: {errors[0]} (see `specpilot check {job.serving_file}`)"
            )
        record.finish("check", {"findings": found})
        say(f"check: {sum(len(f) for f in found.values())} findings, none refuses the start")
    if not record.done("plan"):
        record.begin("plan", 0)
        plans: dict[str, dict[str, Any]] = {}
        recommended: list[str] = []
        for key, r in resolved.items():
            plan = make_plan(r)
            problems = [p.message for p in plan.problems]
            plans[str(key)] = {
                "fits": plan.fits,
                "problems": problems,
                "recommended_args": list(plan.recommended_args),
                "recommended_env": dict(plan.recommended_env),
                "notes": list(plan.notes),
            }
            if not plan.fits:
                record.fail("plan", problems[0] if problems else "does not fit")
                raise JobFailed(
                    f"the plan does not fit: {'; '.join(problems)} (see `specpilot plan {job.serving_file}`)"
                )
            recommended += [" ".join(plan.recommended_args)] if plan.recommended_args else []
        record.finish("plan", {"plans": plans})
        say("plan: fits" + "".join(f"; recommends {r}" for r in recommended))


async def _bench(job: JobFile, record: JobRecord, say: Say) -> None:
    if record.done("bench"):
        return
    if job.bench is None:
        record.finish("bench", {"why": "no [job.bench] in the job file"}, status="skipped")
        return
    from specpilot.bench.finish import finish_bench
    from specpilot.bench.run import BenchRequest, plan_settings, run_bench
    from specpilot.bench.variants import default_variants, parse_variants

    spec = _server_spec(job)
    bench = job.bench
    record.begin("bench", spec.gpu.count)
    chosen = parse_variants(bench.variants, spec) if bench.variants else default_variants(spec)
    settings = plan_settings(
        job.output, sample_rows=bench.sample, sampling=job.sampling, budget_s=bench.budget_s,
        warmup_s=min(30.0, bench.budget_s / 4), progress_interval_s=0.0,
    )  # fmt: skip
    request = BenchRequest(spec, job.prompts, job.output, chosen, bench.sample, 0, settings)
    result = await run_bench(request, say)
    best = job.output / BEST_SPEC
    if result.winner is not None:
        best.unlink(missing_ok=True)  # a bench run again writes its own winner
    if finish_bench(result, request, best).best_path is None:
        why = result.verdict or "no variant could be measured"
        record.fail("bench", why)
        raise JobFailed(f"bench: {why} (see {job.output / 'bench.json'})")
    record.finish(
        "bench",
        {"winner": result.winner, "spec": str(best), "table": result.data.get("variants", [])},
    )
    say(f"bench: {result.winner} wins; the job starts it ({best})")


async def run_before_serving(job: JobFile, record: JobRecord, say: Say) -> None:
    """check, plan and bench (each skipped when finished); then the projection at start."""
    await _check_and_plan(job, record, say)
    await _bench(job, record, say)
    from specpilot.job.cost import projection_at_start

    projection = projection_at_start(job, _gpus_of(job))
    if projection is not None:
        record.data["projection"] = projection.to_json()
        record.save()
        say(f"projected for the whole input: {projection.line()}")
    else:
        say("projected: not yet (no bench); the live projection follows once rows finish")


def serving_spec(job: JobFile, record: JobRecord) -> Spec:
    """The spec `up` starts: the bench's winner when there was a bench, with the bounds the
    healer applied since (recorded as the server's args)."""
    best = record.stage("bench").get("evidence", {}).get("spec")
    spec = load_spec(Path(best)) if best else _server_spec(job)
    args = record.data.get("server_args")
    if args is not None:
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": list(args)})})
    return spec


# -- up, generate, export, down: one event loop ----------------------------------------


async def _up_server(job: JobFile, record: JobRecord, say: Say) -> Spec:
    from specpilot.job.serve import Started, clear_run, recorded_run_serving, start

    spec = serving_spec(job, record)
    recorded = record.stage("up").get("evidence")
    if record.done("up") and recorded is not None and await recorded_run_serving(spec.name, recorded):
        say(f"up: {spec.name} is still serving as this job started it (pid {recorded['pid']}); reusing it")
        return spec
    if record.done("up"):
        say(f"up: {spec.name} is no longer serving; starting it again")
    stage = record.stage("up")
    # a start this job began and a kill interrupted: its run is the job's own to stop
    interrupted = stage.get("started_at") if stage.get("status") == "running" else None
    record.begin("up", _gpus_of(job))
    await clear_run(spec.name, recorded, say, ours_since=interrupted)
    started: Started = await start(spec, say)
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
    return started.spec


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
    job: JobFile, record: JobRecord, served: str, spec: Spec | None, say: Say
) -> tuple[int, str]:
    from specpilot.generate.dispatch.endpoints import Endpoint, endpoints_of_fleet, normalize_url
    from specpilot.generate.eta import all_of, projecting
    from specpilot.generate.job import JobConfig, generate_in_loop
    from specpilot.job.heal import ServerHealer, fleet_healer
    from specpilot.launch.state import read_state

    if spec is not None:
        state = read_state(served)
        # no run name: a death is the healer's to mend, not a reason for generate to stop
        endpoints = [Endpoint(normalize_url(state.endpoint), state.served_model_name or None)]
        heal = ServerHealer(spec, record, job.max_restarts, say).watcher()
    else:
        endpoints = endpoints_of_fleet(served)
        heal = fleet_healer(served, record, job.max_restarts, say)
    config = JobConfig(
        input_path=job.prompts, output_dir=job.output, endpoints=endpoints, model=None, sampling=job.sampling,
        concurrency=job.concurrency, notify=say, progress_interval_s=PROJECTION_EVERY_S,
    )  # fmt: skip
    record.begin("generate", _gpus_of(job))
    from specpilot.job.cost import heartbeat

    watchers = [
        heal,
        projecting(job.output, PROJECTION_EVERY_S, say),
        heartbeat(record, "generate", HEARTBEAT_S),
    ]
    outcome = await generate_in_loop(config, all_of(watchers))
    summary = outcome.summary
    evidence = {
        "rows_total": summary.total, "rows_done": summary.done, "clean": summary.clean,
        "flagged": summary.flagged, "failed": summary.failed, "message": outcome.message,
    }  # fmt: skip
    if outcome.exit_code != 0:
        record.stage("generate").update(evidence=evidence)
        record.fail("generate", outcome.message)
        return outcome.exit_code, f"generate: {outcome.message}"
    record.finish("generate", evidence)
    say(f"generate: {outcome.message}")
    return 0, ""


def _export(job: JobFile, record: JobRecord, say: Say) -> None:
    from specpilot.export.run import export

    stage = record.stage("export")
    written: dict[str, Any] = dict(stage.get("formats", {}))
    record.begin("export", _gpus_of(job))  # the servers run until down
    for fmt in job.export:
        if fmt in written:
            continue
        try:
            result = export(
                job.output, fmt, None, include_flagged=job.include_flagged, per_turn=True, overwrite=True
            )
        except UserError as err:  # e.g. every row flagged: the job failed here, not its input
            record.fail("export", str(err))
            raise JobFailed(f"export {fmt}: {err}") from None
        written[fmt] = {
            "rows": result.rows,
            "files": [str(f) for f in result.files],
            "warnings": result.warnings,
        }
        stage["formats"] = written  # a kill between formats keeps those done
        record.save()
        where = result.files[0] if len(result.files) == 1 else result.files[0].parent
        say(f"export: {result.rows} rows as {fmt} to {where}")
    flagged = int(record.stage("generate").get("evidence", {}).get("flagged") or 0)
    left_out = 0 if job.include_flagged else flagged
    if left_out:
        # nothing silent: a dataset smaller than the rows generated says why
        say(
            f"export: {left_out:,} flagged rows left out (see `specpilot report {job.output}` for why "
            "each was flagged); [job] include_flagged = true keeps them"
        )
    record.finish("export", {"formats": written, "flagged_left_out": left_out})


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
        from specpilot.launch.ops import run_down

        result = await run_down(served, timeout_s=30.0)
    record.finish("down", {"stopped": served, "result": result})
    say(f"down: {served} stopped")


def _served_name(job: JobFile, record: JobRecord) -> str | None:
    evidence = record.stage("up").get("evidence") or {}
    name = evidence.get("name") or evidence.get("fleet")
    return str(name) if name else None


async def run_job(job: JobFile, record: JobRecord, say: Say) -> JobResult:
    """Every stage after `prepare` and `begin`, each skipped when finished."""
    await run_before_serving(job, record, say)
    return await serve(job, record, say)


async def serve(job: JobFile, record: JobRecord, say: Say) -> JobResult:
    """up -> generate -> export -> down, each skipped when finished."""
    result = JobResult(job, record)
    fleet = job.fleet is not None
    served = _served_name(job, record)
    spec: Spec | None = None
    if not record.done("generate"):
        if fleet:
            served = await _up_fleet(job, record, say)
        else:
            spec = await _up_server(job, record, say)
            served = spec.name
        code, message = await _generate(job, record, served, spec, say)
        if code != 0:
            if not job.keep_servers:
                await _down(job, record, served, fleet, say)
                record.reset_from("down")  # the rerun starts them again; down is not finished
                record.save()
            result.exit_code, result.message = code, message
            return result
    if not record.done("export"):
        _export(job, record, say)
    if not record.done("down"):
        await _down(job, record, served, fleet, say)
    result.message = f"job done: {record.stage('generate').get('evidence', {}).get('message', '')}"
    return result
