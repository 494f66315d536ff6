"""`up`: write, ship, verify, start, prove, watch; ready or a classified failure.

The decisive signal is the engine's own log, read whole and classified line by
line; the health endpoint confirms readiness; the process table proves the
process is the planned one. A failure is decided within `grace_s` of the fatal
line (collecting the rest of the error meanwhile), the process group is stopped,
and nothing is left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specpilot.hosts.base import Host, HostFacts
from specpilot.launch import rundir
from specpilot.launch.allocations import plan_diff
from specpilot.launch.classify import Failure, Fix, LogClassifier
from specpilot.launch.command import PlannedLaunch, host_model_path, plan_launch
from specpilot.launch.health import HealthAnswer, probe
from specpilot.launch.render import render_env_file, render_launch_script
from specpilot.launch.secrets import mask_argv, redact, secret_values
from specpilot.launch.speclike import LaunchSpec
from specpilot.launch.state import write_state
from specpilot.launch.stop import stop_group
from specpilot.launch.verify import Mismatch, check_live, wait_for_argv

#: progress callback: (phase, elapsed_s, last meaningful line)
Progress = Callable[[str, float, str | None], None]
#: test seam: runs after shipping, before the re-verification and the start
AfterShip = Callable[[str], Awaitable[None]]


@dataclass
class UpOptions:
    grace_s: float = 0.5  # after a fatal line: collect the rest of the error at most this long
    quiet_s: float = 0.2  # ... or until the log has been quiet this long (the block ended)
    term_timeout_s: float = 0.3  # on failure: SIGTERM, then SIGKILL after this
    verify_timeout_s: float = 5.0  # bash launch.sh -> exec engine transition
    reverify_every_s: float = 1.0
    health_every_s: float = 2.0  # before the log says ready
    health_fast_every_s: float = 0.2  # after the log says ready
    after_ship: AfterShip | None = None


@dataclass
class UpResult:
    """The outcome, shaped as `specpilot up --json` prints it."""

    name: str
    phase: str  # "ready" | "failed"
    cause: str
    error: str | None = None
    fix: Fix | None = None
    pid: int | None = None
    endpoint: str | None = None
    allocations: dict[str, int | float] = field(default_factory=dict)
    plan_diff: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    last_phase: str | None = None
    remote_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "cause": self.cause,
            "error": self.error,
            "fix": None if self.fix is None else self.fix.to_json(),
            "pid": self.pid,
            "endpoint": self.endpoint,
            "allocations": self.allocations,
            "plan_diff": self.plan_diff,
            "elapsed_s": round(self.elapsed_s, 3),
            "last_phase": self.last_phase,
            "run_dir": self.remote_dir,
        }


def _spec_text(spec: LaunchSpec, secrets: list[str]) -> bytes:
    """The spec as given, with secret values masked (they never reach the host's disk)."""
    source = spec.source_path
    if source is not None and Path(source).is_file():
        text = Path(source).read_text()
    else:
        from specpilot.spec import Spec, spec_to_toml

        text = spec_to_toml(spec) if isinstance(spec, Spec) else f'name = "{spec.name}"\n'
    return redact(text, secrets).encode()


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
    try:
        return await host.facts()
    except Exception:  # facts are informative only; a launch must not fail on them
        return None


class _Run:
    """One start in progress; owns the tasks that read the log, the pid and the endpoint."""

    def __init__(
        self,
        host: Host,
        spec: LaunchSpec,
        planned: PlannedLaunch,
        remote_dir: str,
        plan_json: Mapping[str, Any] | None,
        options: UpOptions,
        progress: Progress | None,
        started: float,
    ) -> None:
        self.host, self.spec, self.planned = host, spec, planned
        self.remote_dir, self.plan_json, self.options = remote_dir, plan_json, options
        self.progress, self.started = progress, started
        self.classifier = LogClassifier(spec.engine.name)
        self.secrets = secret_values(planned.env, planned.argv)
        self.events: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self.pid: int | None = None
        self.launcher = ("bash", f"{remote_dir}/{rundir.LAUNCH_FILE}")
        self.log_path = f"{remote_dir}/{rundir.LOG_FILE}"
        self.consumed_bytes = 0  # log bytes already turned into "line" events
        self.stop_task: asyncio.Task[str] | None = None
        self._follow_task: asyncio.Task[None] | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _say(self) -> None:
        if self.progress is not None:
            line = self.classifier.last_meaningful_line
            self.progress(self.classifier.phase, self.elapsed(), None if line is None else self._hide(line))

    def _hide(self, text: str) -> str:
        return redact(text, self.secrets)

    def result(self, phase: str, cause: str, **kw: Any) -> UpResult:
        allocations = dict(self.classifier.allocations)
        return UpResult(
            name=self.spec.name,
            phase=phase,
            cause=cause,
            pid=self.pid,
            endpoint=self.planned.endpoint,
            allocations=allocations,
            plan_diff=plan_diff(allocations, self.plan_json),
            elapsed_s=self.elapsed(),
            last_phase=self.classifier.phase,
            remote_dir=self.remote_dir,
            **kw,
        )

    def failed(self, failure: Failure) -> UpResult:
        return self.result("failed", failure.cause, error=self._hide(failure.error), fix=failure.fix)

    def mismatched(self, mismatch: Mismatch) -> UpResult:
        error = f"the live process's {mismatch.what} differs from the plan:\n{mismatch.diff}"
        return self.result("failed", "mismatch", error=self._hide(error))

    async def _follow_log(self) -> None:
        partial = b""
        async for chunk in self.host.follow(self.log_path, 0):
            partial += chunk
            *lines, partial = partial.split(b"\n")
            for raw in lines:
                self.consumed_bytes += len(raw) + 1
                await self.events.put(("line", raw.decode(errors="replace").rstrip("\r")))

    def _feed(self, line: str) -> None:
        if self.classifier.feed(line).kind is not None:
            self._say()

    async def _catch_up(self) -> None:
        """The process is gone: its log is complete. Take every line not yet classified
        (queued, or not yet delivered by the follower) in one read, in order."""
        await self.stop_following()
        while not self.events.empty():
            kind, payload = self.events.get_nowait()
            if kind == "line":
                assert isinstance(payload, str)
                self._feed(payload)
        if self.classifier.fatal_seen:
            return  # the error is in hand; the rest is not worth a round trip
        rest = await self.host.read_bytes(self.log_path, self.consumed_bytes)
        for raw in rest.decode(errors="replace").splitlines():
            self._feed(raw.rstrip("\r"))

    def _stop_soon(self, pid: int) -> None:
        """A fatal line arrived: start stopping the group now, signalling after `quiet_s`,
        so the stop's round trip overlaps the collection of the error's last lines."""
        if self.stop_task is None:
            self.stop_task = asyncio.create_task(
                stop_group(
                    self.host,
                    pid,
                    term_timeout_s=self.options.term_timeout_s,
                    delay_s=self.options.quiet_s,
                )
            )

    async def _watch_pid(self, pid: int) -> None:
        while await self.host.pid_alive(pid):
            await asyncio.sleep(0.05)
        await self.events.put(("exit", None))

    async def _poll_health(self) -> None:
        while True:
            answer = await probe(self.host, self.planned.endpoint)
            await self.events.put(("health", answer))
            fast = self.classifier.ready_seen
            await asyncio.sleep(self.options.health_fast_every_s if fast else self.options.health_every_s)

    async def _verify(self, pid: int) -> None:
        """Prove the live process is the planned one; then keep proving it while starting."""
        argv, env = self.planned.argv, self.planned.env
        live = await wait_for_argv(
            self.host, pid, argv, self.launcher, timeout_s=self.options.verify_timeout_s
        )
        if live is None:
            return  # gone before it could be checked: the log and the exit tell why
        while True:
            mismatch = await check_live(self.host, pid, argv, env)
            await self.events.put(("verified", mismatch))
            if mismatch is not None:
                return
            await asyncio.sleep(self.options.reverify_every_s)

    async def _reporting(self, work: Awaitable[None]) -> None:
        """Run a watcher; if it fails (the host went away), hand the error to the decider
        instead of letting the start wait for a signal that will never come."""
        try:
            await work
        except Exception as err:
            await self.events.put(("error", err))

    def start_following(self) -> None:
        """Follow the log before the process exists, so its first line is not late."""
        self._follow_task = asyncio.create_task(self._reporting(self._follow_log()))

    async def stop_following(self) -> None:
        if self._follow_task is not None:
            self._follow_task.cancel()
            await asyncio.gather(self._follow_task, return_exceptions=True)

    async def watch(self, pid: int) -> UpResult:
        """Classify until ready or failed. The caller stops the group on failure."""
        tasks = [
            asyncio.create_task(self._reporting(self._watch_pid(pid))),
            asyncio.create_task(self._reporting(self._poll_health())),
            asyncio.create_task(self._reporting(self._verify(pid))),
        ]
        try:
            return await self._decide(pid)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _decide(self, pid: int) -> UpResult:
        opts, server = self.options, self.spec.server
        fatal_at: float | None = None
        last_line_at = time.monotonic()
        verified = False
        health: HealthAnswer | None = None
        while True:
            now = time.monotonic()
            waits = [0.1]
            if fatal_at is not None:
                waits += [fatal_at + opts.grace_s - now, last_line_at + opts.quiet_s - now]
            with contextlib.suppress(TimeoutError):
                kind, payload = await asyncio.wait_for(self.events.get(), max(0.0, min(waits)))
                if kind == "line":
                    assert isinstance(payload, str)
                    last_line_at = time.monotonic()
                    self._feed(payload)
                elif kind == "exit":
                    await self._catch_up()
                    return self.failed(self.classifier.failure(exited=True))
                elif kind == "health":
                    assert isinstance(payload, HealthAnswer)
                    health = payload
                elif kind == "error":
                    assert isinstance(payload, Exception)
                    raise payload
                elif kind == "verified":
                    if payload is not None and fatal_at is None:
                        assert isinstance(payload, Mismatch)
                        return self.mismatched(payload)
                    verified = True
            now = time.monotonic()
            if self.classifier.fatal_seen and fatal_at is None:
                fatal_at = now
                self._stop_soon(pid)
            if fatal_at is not None and (
                now >= fatal_at + opts.grace_s or now >= last_line_at + opts.quiet_s
            ):
                return self.failed(self.classifier.failure(exited=False))
            if self.classifier.ready_seen and verified and health is not None and health.ok:
                # the serving process is proven once more, at the moment it is declared ready
                mismatch = await check_live(self.host, pid, self.planned.argv, self.planned.env)
                if mismatch is not None:
                    return self.mismatched(mismatch)
                return self.result("ready", "ready")
            if now - last_line_at >= server.hang_timeout_s and not self.classifier.ready_seen:
                return self.result("failed", "hang", error=self._hang_error(now - last_line_at))
            if self.elapsed() >= server.ready_timeout_s:
                return self.result(
                    "failed",
                    "timeout",
                    error=f"not ready after {self.elapsed():.0f} s "
                    f"(phase '{self.classifier.phase}'; raise [server] ready_timeout_s "
                    "if this engine needs longer)",
                )

    def _hang_error(self, quiet_s: float) -> str:
        return self._hide(
            f"no new log line for {quiet_s:.0f} s during phase '{self.classifier.phase}'; "
            f"last line: {self.classifier.last_meaningful_line or '(none)'}"
        )


async def launch(
    spec: LaunchSpec,
    host: Host,
    *,
    plan_json: Mapping[str, Any] | None,
    options: UpOptions | None = None,
    progress: Progress | None = None,
    local_env: Mapping[str, str] | None = None,
) -> UpResult:
    """Start `spec` on `host` under supervision; return ready or a classified failure.

    On failure nothing is left running. The local state file is written once the
    pid exists and again with the outcome."""
    options = options or UpOptions()
    started = time.monotonic()
    home, host_env, facts = await asyncio.gather(host.home(), _host_env(host), _facts_or_none(host))
    planned = plan_launch(
        spec,
        host_env=host_env,
        local_env=os.environ if local_env is None else local_env,
        model_path=host_model_path(spec, home=home, local=host.target == "local"),
    )
    remote_dir = rundir.run_dir_path(home, spec.name)
    run = _Run(host, spec, planned, remote_dir, plan_json, options, progress, started)
    files = rundir.RunFiles(
        spec_toml=_spec_text(spec, run.secrets),
        plan_json=(json.dumps(plan_json or {}, indent=2, sort_keys=True) + "\n").encode(),
        launch_sh=render_launch_script(planned.argv),
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
    run: _Run, spec: LaunchSpec, host: Host, files: rundir.RunFiles, options: UpOptions
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
            fix=Fix(f"stop pid {owner.pid} or set another [server] port"),
        )
    altered = await rundir.verify_on_host(host, remote_dir, files)
    if altered:
        return run.result(
            "failed",
            "mismatch",
            error="run files changed on the host after shipping:\n" + "\n".join(altered),
        )

    pid = await host.spawn_detached(
        run.launcher,
        env=planned.env,
        cwd=remote_dir,
        log_path=run.log_path,
        pid_path=f"{remote_dir}/{rundir.PID_FILE}",
    )
    run.pid = pid
    state = {
        "name": spec.name,
        "target": host.target,
        "host_options": {
            "identity_file": spec.host.identity_file,
            "known_hosts": spec.host.known_hosts,
            "ssh_config": spec.host.ssh_config,
            "accept_new_host_key": spec.host.accept_new_host_key,
        },
        "remote_dir": remote_dir,
        "log_path": run.log_path,
        "pid": pid,
        "pgid": pid,
        "endpoint": planned.endpoint,
        "served_model_name": planned.served_model_name,
        "engine": spec.engine.name,
        "engine_version": spec.engine.version,
        "argv": mask_argv(planned.argv),
        "phase": "starting",
        "cause": None,
        "started_at": time.time(),
    }
    write_state(state)
    result: UpResult | None = None
    try:
        result = await run.watch(pid)
    finally:
        if run.stop_task is not None:
            await run.stop_task
        elif result is None or result.phase != "ready":
            await stop_group(host, pid, term_timeout_s=options.term_timeout_s)
        if result is not None:
            result.elapsed_s = run.elapsed()
            state.update(phase=result.phase, cause=result.cause, allocations=result.allocations)
        else:
            state.update(phase="failed", cause="unknown")
        write_state(state)
    return result
