"""Watching one start: the log, the pid, the endpoint and the live argv/env, as events.

Four watchers feed one queue; `RunWatch.watch` decides from it: ready (log says so,
endpoint answers 200, process proven), or a classified failure within `grace_s` of
the fatal line (the group's stop already under way), a hang, a timeout, a mismatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Mapping
from typing import Any

from specpilot.hosts.base import Host
from specpilot.launch import rundir
from specpilot.launch.allocations import plan_diff
from specpilot.launch.classify import Failure, LogClassifier
from specpilot.launch.command import PlannedLaunch
from specpilot.launch.health import HealthAnswer, probe
from specpilot.launch.outcome import Progress, UpOptions, UpResult
from specpilot.launch.stop import stop_group
from specpilot.launch.verify import Mismatch, check_live, wait_for_argv
from specpilot.secrets import redact, secret_values
from specpilot.spec import Spec


class RunWatch:
    """One start in progress; owns the tasks that read the log, the pid and the endpoint."""

    def __init__(
        self,
        host: Host,
        spec: Spec,
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
        self.exit_path = f"{remote_dir}/{rundir.EXIT_FILE}"
        self.consumed_bytes = 0  # log bytes already turned into "line" events
        self.fed_bytes = 0  # log bytes classified: at ready, where serving begins
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
                await self.events.put(("line", (raw.decode(errors="replace").rstrip("\r"), len(raw) + 1)))

    def _feed(self, line: str) -> None:
        if self.classifier.feed(line).kind is not None:
            self._say()

    def _feed_event(self, payload: object) -> None:
        """A queued line: classify it and count its bytes."""
        assert isinstance(payload, tuple)
        line, size_bytes = payload
        self._feed(line)
        self.fed_bytes += size_bytes

    async def _collect_rest(self, until: float) -> None:
        """The process has exited: its log is (nearly) complete. Take the lines still on
        their way (the follower polls; a helper process may still write) until the log has
        been quiet for `quiet_s` or `until`, then every byte not yet classified, in order."""
        last_line_at = time.monotonic()
        while (wait_s := min(until, last_line_at + self.options.quiet_s) - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(wait_s):
                    kind, payload = await self.events.get()
            except TimeoutError:
                break
            if kind == "line":
                self._feed_event(payload)
                last_line_at = time.monotonic()
        await self.stop_following()
        while not self.events.empty():
            kind, payload = self.events.get_nowait()
            if kind == "line":
                self._feed_event(payload)
        rest = await self.host.read_bytes(self.log_path, self.consumed_bytes)
        for raw in rest.decode(errors="replace").splitlines():
            self._feed(raw.rstrip("\r"))

    async def _returncode(self, until: float) -> int | None:
        """How the engine ended, as its watcher recorded it; None when no record came by
        `until` (its watcher is gone, so a zombie engine's status is unknowable)."""
        while True:
            returncode = await self.host.exit_status(self.exit_path)
            if returncode is not None or time.monotonic() >= until:
                return returncode
            await asyncio.sleep(0.02)

    async def exited(self) -> UpResult:
        """Exit beats argv: classify from the log's last lines and report the returncode."""
        until = time.monotonic() + self.options.grace_s
        returncode, _ = await asyncio.gather(self._returncode(until), self._collect_rest(until))
        result = self.failed(self.classifier.failure(exited=True, exit_code=returncode))
        result.exit_status = returncode
        return result

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
                async with asyncio.timeout(max(0.0, min(waits))):
                    kind, payload = await self.events.get()
                if kind == "line":
                    last_line_at = time.monotonic()
                    self._feed_event(payload)
                elif kind == "exit":
                    return await self.exited()
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
