"""Healing while the job generates: every server the job started is watched, and restarted
through the same verified path when it dies.

The generate dispatcher already treats a server that stops answering as taken out: its rows
go back to the queue without spending attempts, and it is probed until it answers again.
The healer's part is to make it answer again: for a single server, follow its log in serving
mode (`launch.serving.watch_serving`), and when it dies restart it with backoff, at most
`max_restarts` times, after an out-of-memory death with the bound `job.bounds` gives; for a
fleet, run `fleet-repair`'s pass (router and members) in this same event loop. Each event is
printed and recorded in job.json. A host that stops answering is reported and the job goes
on with the rest.

A server alive but stalled (the dispatcher's stall watchdog: requests in flight, no token
progress) is restarted the same way: stopped through the verified stop (`launch.ops.run_down`),
started again, and handed back to the dispatcher (`Dispatcher.restarted`), its rows requeued
without spending attempts. Behind a fleet's router the dispatcher cannot see one member stall:
each fleet pass reads the members' own token progress (`job.member_stalls`) and restarts a
stalled member through `fleet.repair.restart_stalled`, within the same restart budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.job import JobWatcher
from specpilot.hosts.base import Host
from specpilot.hosts.errors import HostError
from specpilot.interrupts import received
from specpilot.job.record import JobRecord
from specpilot.job.serve import STOP_TIMEOUT_S, clear_run, start, wait_port_closed
from specpilot.launch.ops import host_for, run_down
from specpilot.launch.recovery import (
    Budget,
    Failure,
    next_start,
    read_serving_log,
    restarts_made,
    serving_death,
)
from specpilot.launch.server_plan import ServerPlan
from specpilot.launch.serving import Crash, record_crash, watch_serving
from specpilot.launch.state import RunState, read_state
from specpilot.taskgroup import beside

Say = Callable[[str], None]
#: seconds before the first restart; doubled for each one after
BACKOFF_S = 1.0
#: how often a fleet is looked over (a pass of fleet-repair)
FLEET_PASS_S = 2.0


def _task_watcher(work: Callable[[Dispatcher], Any], busy: asyncio.Lock) -> JobWatcher:
    """`work` beside the job (its failure ends the job, and is raised); at the end a restart
    it is in the middle of (holding `busy`) is finished first: a start cut off halfway would
    leave a run neither ready nor stopped."""

    @contextlib.asynccontextmanager
    async def watch(dispatcher: Dispatcher) -> AsyncIterator[object]:
        held = False
        try:
            async with beside(lambda: work(dispatcher), "restarting the job's servers"):
                try:
                    yield None
                finally:
                    await busy.acquire()  # the work is cancelled only once it holds no restart
                    held = True
        finally:
            if held:
                busy.release()

    return watch


class ServerHealer:
    """Restarts the job's one server when it dies; `server` follows the bounds applied."""

    def __init__(self, server: ServerPlan, record: JobRecord, max_restarts: int, say: Say) -> None:
        self.server = server
        self.record = record
        self.max_restarts = max_restarts
        self.say = say
        self.busy = asyncio.Lock()
        self.restarts = restarts_made(record.data.get("restarts", [])).get(server.spec.name, 0)
        #: the dispatcher found the server stalled: (its base URL, why)
        self.stall: tuple[str, str] | None = None
        self.stalled = asyncio.Event()

    def watcher(self) -> JobWatcher:
        return _task_watcher(self._loop, self.busy)

    def _on_stall(self, base_url: str, why: str) -> None:
        self.stall = (base_url, why)
        self.stalled.set()

    async def _death_or_stall(self, host: Host, state: RunState) -> Crash | None:
        """How the server stopped serving: its crash, or None when the dispatcher found it stalled."""
        crashed: list[Crash] = []
        failed: list[HostError | OSError] = []
        async with asyncio.TaskGroup() as group:

            async def death() -> None:
                try:
                    crashed.append(await watch_serving(host, state))
                except (HostError, OSError) as err:
                    failed.append(err)  # raised below, as itself rather than in a group
                stall.cancel()

            async def stalled() -> None:
                await self.stalled.wait()
                dying.cancel()

            dying = group.create_task(death())
            stall = group.create_task(stalled())
        if failed:
            raise failed[0]
        return crashed[0] if crashed else None

    async def _loop(self, dispatcher: Dispatcher) -> None:
        dispatcher.restart_on_stall(self._on_stall)
        try:
            await self._heal(dispatcher)
        finally:  # a stall found from now on is the dispatcher's alone
            dispatcher.restart_on_stall(None)

    async def _heal(self, dispatcher: Dispatcher) -> None:
        name = self.server.spec.name
        while True:
            state = read_state(name)
            host = host_for(state)
            serving_log = ""
            try:
                crash = await self._death_or_stall(host, state)
                if crash is not None:
                    # the whole log since ready: the process can be found gone before its last
                    # lines were read, and the bound is chosen from what it printed as it died
                    serving_log = await read_serving_log(host, state)
            except (HostError, OSError) as err:
                self.say(f"{name}: its host stopped answering ({err}); the job goes on with the rest")
                self.record.note("events", {"run": name, "event": "host_unreachable", "error": str(err)})
                return
            finally:
                await host.close()
            ended = serving_death(crash, state, serving_log) if crash is not None else None
            async with self.busy:
                if not await self._restart(dispatcher, state.pid, ended):
                    return

    async def _restart(self, dispatcher: Dispatcher, pid: int, ended: tuple[Crash, Failure] | None) -> bool:
        """Restart the dead (`ended`: its crash, as the policy reads it) or stalled (None) server;
        False when the job is told to stop instead."""
        name = self.server.spec.name
        began_s = time.monotonic()  # the restart's time is the job's GPU-hours wasted
        stall, self.stall = self.stall, None
        self.stalled.clear()
        failure, said = self._failure_of(name, ended, stall)
        budget = Budget(max_restarts=self.max_restarts, restarts=self.restarts, backoff_s=BACKOFF_S)
        recovery = await next_start(self.server, failure, budget)
        if recovery.action == "give_up":
            self.record.note(
                "restarts",
                {
                    "run": name,
                    "cause": failure.cause,
                    "line": failure.line,
                    "outcome": "gave_up",
                    "restarts": self.restarts,
                },
            )
            dispatcher.stop_for(
                f"{said}; gave up after {self.restarts} restarts ([job] max_restarts); fix the cause, "
                "then run the same command to resume"
            )
            return False
        self.restarts += 1
        self.server = recovery.server
        bounded = recovery.bound
        self.say(
            f"{said}; restart {self.restarts} of {self.max_restarts}"
            + (f"; {bounded.line()}" if bounded is not None else "")
            + "; its rows go back to the queue"
        )
        entry: dict[str, Any] = {"run": name, "cause": failure.cause, "line": failure.line,
                                 "restarts": self.restarts, "bound": recovery.change}  # fmt: skip
        try:
            await asyncio.sleep(recovery.backoff_s)
            if stall is not None and not await self._stop_stalled(dispatcher, name, pid, said):
                return False
            return await self._start_again(dispatcher, name, pid, entry, began_s, stall)
        finally:
            if "outcome" not in entry:
                # cut short (a signal ended its start or the job's task; a stop or start that
                # failed): it spent the budget all the same, or the rerun says 'restart 1' again
                outcome = "interrupted" if received() else "failed"
                entry.update(outcome=outcome, end=dispatcher.stop_reason or "the job's task was cancelled")
                entry["down_s"] = round(time.monotonic() - began_s, 3)
                self.record.note("restarts", entry)

    def _failure_of(
        self, name: str, ended: tuple[Crash, Failure] | None, stall: tuple[str, str] | None
    ) -> tuple[Failure, str]:
        """The failure the policy reads (a death's crash recorded first) and the line saying it."""
        if ended is not None:
            crash, failure = ended
            record_crash(name, crash)
            return failure, f"{name} died ({failure.cause}): {failure.line}"
        assert stall is not None  # the event is set with it
        failure = Failure("serving", "stall", stall[1])
        return failure, f"{name} stalled: {failure.line}"

    async def _stop_stalled(self, dispatcher: Dispatcher, name: str, pid: int, said: str) -> bool:
        """Stop the stalled engine before its restart; False (the job told to stop) where it stays."""
        self.say(f"{name}: stopping the stalled engine (pid {pid})")
        stopped = await run_down(name, timeout_s=STOP_TIMEOUT_S)
        if stopped.get("phase") != "stopped":
            dispatcher.stop_for(
                f"{said}; it could not be stopped ({stopped.get('stopped')}): see `specpilot status {name}`"
            )
            return False
        return True

    async def _start_again(
        self,
        dispatcher: Dispatcher,
        name: str,
        pid: int,
        entry: dict[str, Any],
        began_s: float,
        stall: tuple[str, str] | None,
    ) -> bool:
        """Start the server again once its port is free, note the restart (`entry`, its outcome
        added) in job.json; False (the job told to stop) where it does not come up."""
        await clear_run(name, {"pid": pid}, self.say)
        await wait_port_closed(self.server.spec)
        try:
            again = await start(self.server, self.say)
        except HostError as err:
            # a signal that ends the job reaches the start's helpers too (Ctrl-C, `timeout`: the
            # whole process group): the job ends for the signal, not for a helper it killed
            if dispatcher.stop_reason is None:
                dispatcher.stop_for(f"{name} did not start again ({err}); see `specpilot logs {name}`")
            return False
        self.server = again.server
        entry.update(outcome=again.result.phase, replans=again.replans or [])
        entry["down_s"] = round(time.monotonic() - began_s, 3)
        self.record.data["server_args"] = list(self.server.spec.engine.args)
        self.record.note("restarts", entry)
        if again.result.phase != "ready":
            last = (again.result.error or "").strip().splitlines()[-1:] or [""]
            dispatcher.stop_for(
                f"{name} did not start again ({again.result.cause}): {last[0]}; see `specpilot logs {name}`"
            )
            return False
        self.say(f"{name}: ready again (pid {again.result.pid}); the job goes on")
        if stall is not None:
            dispatcher.restarted(stall[0])
        return True


def fleet_healer(fleet_name: str, record: JobRecord, max_restarts: int, say: Say) -> JobWatcher:
    """A pass of fleet-repair every FLEET_PASS_S, in the job's own event loop; before it, each
    member found stalled (`job.member_stalls`) is restarted the same way, within the same budget."""
    from specpilot.fleet.repair import Restarts, load_recorded_fleet, repair_fleet, restart_stalled
    from specpilot.job.member_stalls import MemberStalls

    busy = asyncio.Lock()

    async def loop(dispatcher: Dispatcher) -> None:
        fleet = load_recorded_fleet(fleet_name)
        # the restarts an earlier run of the job made count: they are read back from job.json
        restarts = Restarts(restarts_made(record.data.get("restarts", [])))
        recorded: set[tuple[str, str]] = set()
        stalls = MemberStalls(fleet)

        async def restart_stalled_members() -> None:
            # the dispatcher's stall bound: the job's stall_after_s, else measured
            for member, why in await stalls.look(dispatcher.watchdog.stall.bound_s()):
                began_s = time.monotonic()
                repair = await restart_stalled(
                    fleet,
                    member,
                    why,
                    max_restarts=max_restarts,
                    backoff_s=BACKOFF_S,
                    say=say,
                    restarts=restarts,
                )
                stalls.restarted(member)
                down_s = round(time.monotonic() - began_s, 3)
                record.note(
                    "restarts", {"run": member.name, **repair.to_json(), "line": why, "down_s": down_s}
                )

        while True:
            await asyncio.sleep(FLEET_PASS_S)
            try:
                async with busy:
                    await restart_stalled_members()
                    result = await repair_fleet(
                        fleet,
                        max_restarts=max_restarts,
                        backoff_s=BACKOFF_S,
                        say=say,
                        restarts=restarts,
                    )
            except (HostError, OSError) as err:
                say(f"fleet {fleet_name}: a host stopped answering ({err}); the job goes on")
                continue
            events = [(m.name, m.action, m.to_json()) for m in result.members]
            events += [(f"{fleet_name} router {r.url}", r.action, r.to_json()) for r in result.routers]
            for name, action, entry in events:
                # a member left out stays so: recorded once, not at every pass
                if action != "ok" and (name, action) not in recorded:
                    record.note("restarts", {"run": name, **entry})
                    if action == "gave_up":
                        recorded.add((name, action))

    return _task_watcher(loop, busy)
