"""`up`: write, ship, verify, start, prove, watch; ready or a classified failure.

The decisive signal is the engine's own log, read whole and classified line by
line; the health endpoint confirms readiness; the process table proves the
process is the planned one. A failure is decided within `grace_s` of the fatal
line (collecting the rest of the error meanwhile), the process group is stopped,
and nothing is left running.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import tomllib
from collections.abc import Mapping
from dataclasses import replace

from specpilot.engines.adapter import EngineRelease
from specpilot.engines.fix import Fix
from specpilot.hosts.base import Host, HostFacts
from specpilot.hosts.errors import HostError
from specpilot.launch import rundir
from specpilot.launch.command import host_model_path, plan_launch
from specpilot.launch.outcome import Progress, UpOptions, UpResult
from specpilot.launch.program import check_program
from specpilot.launch.render import render_env_file, render_launch_script
from specpilot.launch.server_plan import ServerPlan
from specpilot.launch.state import RunState, own_run_folder, write_state
from specpilot.launch.stop import RUN_TOKEN_VAR, stop_group
from specpilot.launch.watch import RunWatch
from specpilot.plan.types import Plan
from specpilot.secrets import mask_argv, mask_env, redact
from specpilot.spec import Spec, spec_to_toml
from specpilot.taskgroup import naming

__all__ = ["UpOptions", "UpResult", "launch", "launch_planned"]


def _spec_text(spec: Spec, secrets: list[str]) -> bytes:
    """The spec as given, with secret values masked (they never reach the host's disk).

    The file's own text keeps its comments, but a secret written with a TOML escape
    (`"hf_ab\\tc"`) does not appear there as its value: when the masked text still
    parses to a secret, the spec is written from its parsed form, secrets masked.
    """
    source = spec.source_path
    if source is not None and source.is_file():
        text = redact(source.read_text(), secrets)
        if not _holds_secret(text, secrets):
            return text.encode()
    engine = spec.engine.model_copy(
        update={"env": mask_env(spec.engine.env), "args": mask_argv(spec.engine.args)}
    )
    return redact(spec_to_toml(spec.model_copy(update={"engine": engine})), secrets).encode()


def _holds_secret(toml_text: str, secrets: list[str]) -> bool:
    """Whether any string the TOML text parses to still contains a secret value."""
    try:
        document: object = tomllib.loads(toml_text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return True
    pending, strings = [document], []
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            pending += [*node.keys(), *node.values()]
        elif isinstance(node, list):
            pending += node
        elif isinstance(node, str):
            strings.append(node)
    return any(secret in text for text in strings for secret in secrets)


async def _host_env(host: Host) -> dict[str, str]:
    """The host's login environment (PATH, HOME, ...), read with `env -0`."""
    result = await host.run(["env", "-0"], check=False, timeout_s=30.0)
    env = {}
    for item in result.stdout.split(b"\0"):
        name, eq, value = item.decode(errors="replace").partition("=")
        if eq:
            env[name] = value
    return env


async def _facts_or_none(host: Host) -> HostFacts | None:
    with naming(f"reading the facts of {host.target}"):
        try:
            return await host.facts()
        except HostError:  # the host could not report them; they are informative only
            return None


async def launch(
    server: ServerPlan,
    host: Host,
    *,
    options: UpOptions | None = None,
    progress: Progress | None = None,
    local_env: Mapping[str, str] | None = None,
) -> UpResult:
    """Start `server` (its spec as it starts, `ServerPlan.started`) on `host` under
    supervision; return ready or a classified failure (`launch_planned`)."""
    return await launch_planned(
        server.started, server.release, host, plan=server.plan, options=options, progress=progress,
        local_env=local_env,
    )  # fmt: skip


async def launch_planned(
    spec: Spec,
    release: EngineRelease,
    host: Host,
    *,
    plan: Plan | None,
    options: UpOptions | None = None,
    progress: Progress | None = None,
    local_env: Mapping[str, str] | None = None,
) -> UpResult:
    """Start `spec` exactly as given, run by `release` (its command resolved it) and planned as
    `plan`, on `host` under supervision (a bench's variant, planned by the bench); return ready
    or a classified failure.

    On failure nothing is left running. The local state file is written once the
    pid exists and again with the outcome."""
    options = options or UpOptions()
    started = time.monotonic()
    local_dir = own_run_folder(spec.name) if host.target == "local" else None
    home, host_env, facts = await asyncio.gather(host.home(), _host_env(host), _facts_or_none(host))
    # the engine the command resolved: argv, secrets and the log's classifier
    planned = plan_launch(
        spec,
        release,
        host_env=host_env,
        local_env=os.environ if local_env is None else local_env,
        model_path=host_model_path(spec, home=home, local=host.target == "local"),
    )
    remote_dir = str(local_dir) if local_dir is not None else rundir.run_dir_path(home, spec.name)
    await check_program(host, planned.argv[0], planned.env.get("PATH", ""), remote_dir)
    run = RunWatch(host, spec, planned, remote_dir, plan, options, progress, started)
    files = rundir.RunFiles(
        spec_toml=_spec_text(spec, run.secrets),
        plan_json=(json.dumps(plan.to_json() if plan else {}, indent=2, sort_keys=True) + "\n").encode(),
        launch_sh=render_launch_script(planned.argv, planned.secret_args),
        env=render_env_file(planned.env_file_env),
    )
    manifest = rundir.build_manifest(
        files,
        name=spec.name,
        engine=spec.engine.name,
        engine_version=spec.engine.version,
        argv_shown=mask_argv(planned.argv),
        facts=facts,
    )
    await host.run(["mkdir", "-p", "-m", "700", remote_dir])
    # a previous run's log must not be classified as this one's: keep it as engine.log.1
    await host.run(["mv", "-f", run.log_path, f"{run.log_path}.1"], check=False)
    await rundir.ship(host, remote_dir, files, manifest)
    if options.after_ship is not None:
        await options.after_ship(remote_dir)

    run.start_following()
    try:
        return await _start_and_watch(run, spec, host, files, options)
    finally:
        await run.stop_following()


async def _start_and_watch(
    run: RunWatch, spec: Spec, host: Host, files: rundir.RunFiles, options: UpOptions
) -> UpResult:
    """Refuse a held port or altered files; start; watch; record the state; stop on failure."""
    remote_dir, planned = run.remote_dir, run.planned
    owner = await host.port_owner(spec.server.port)
    if owner is not None:
        holder = " ".join(mask_argv(owner.argv)) or "(argv unknown)"
        return run.result(
            "failed",
            "port_in_use",
            error=f"port {spec.server.port} is already held by pid {owner.pid}: {holder}",
            fix=Fix(text=f"stop pid {owner.pid} or set another [server] port"),
        )
    altered = await rundir.verify_on_host(host, remote_dir, files)
    if altered:
        return run.result(
            "failed",
            "mismatch",
            error="run files changed on the host after shipping:\n" + "\n".join(altered),
        )

    # recorded before the spawn: a stop finds the run's processes by its token even when
    # an interrupt lands before the pid comes back (launch.shield, launch.stop)
    state = RunState(
        name=spec.name,
        # the target the run was started on (status and down reconnect to it), reached as [host] says
        host=spec.host.model_copy(update={"target": host.target}),
        remote_dir=remote_dir,
        log_path=run.log_path,
        exit_path=run.exit_path,
        pid=0,
        start_ticks=None,
        run_token=run.token,
        pgid=0,
        endpoint=planned.endpoint,
        served_model_name=planned.served_model_name,
        engine=spec.engine.name,
        engine_version=spec.engine.version,
        argv=tuple(mask_argv(planned.argv)),
        phase="starting",
        cause=None,
        started_at_s=time.time(),
    )
    write_state(state)
    result: UpResult | None = None
    try:
        pid = await host.spawn_detached(
            run.launcher,
            # the token marks the run's processes, its children's too (launch.stop proves by it)
            env={**planned.env, RUN_TOKEN_VAR: run.token},
            cwd=remote_dir,
            log_path=run.log_path,
            pid_path=f"{remote_dir}/{rundir.PID_FILE}",
            exit_path=run.exit_path,
        )
        run.pid = pid
        # (pid, start time) names this process for good: `down` and `status` check it
        # before trusting the pid, which the kernel may give to another process later
        identity = await host.proc_stat(pid)
        run.start_ticks = None if identity is None else identity.start_ticks
        state = replace(state, pid=pid, pgid=pid, start_ticks=run.start_ticks)
        write_state(state)
        result = await run.watch(pid)
    finally:
        if run.stop_task is not None:
            await run.stop_task
        elif result is None or result.phase != "ready":
            await stop_group(
                host,
                run.pid or 0,
                term_timeout_s=options.term_timeout_s,
                start_ticks=run.start_ticks,
                token=run.token,
            )
        if result is not None:
            result.elapsed_s = run.elapsed()
            state = state.ended(
                result.phase,
                result.cause,
                allocations=result.allocations,
                exit_status=result.exit_status,
                # where serving begins: watched from there
                ready_log_bytes=run.fed_bytes if result.phase == "ready" else None,
                ready_s=round(result.elapsed_s, 2) if result.phase == "ready" else None,
            )
        else:
            state = state.ended("failed", "unknown")
        write_state(state)
    return result
