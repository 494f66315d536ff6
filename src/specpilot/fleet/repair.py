"""`specpilot fleet-repair NAME`: restart a dead router, find dead members, restart them,
register them again.

A dead router is started again first, on its host, through the same checks as `up`
(`smg` there and new enough, its ports free) and with the same argv; the engines keep
running and every serving member is then registered with it again.

A member that is not serving is first taken out of the router (no request goes to it),
then started again on its host with the same verified files (`launch` ships and checks
them as `up` did), as `launch.recovery` says (after an out-of-memory death, with the
engine's bound for it), at most `max_restarts` times with doubling backoff, and registered
again once ready (delete, then add: the router keeps stale state for a restarted
address). A member serving but missing from the router is registered again. A member alive but
stalled (a job's finding, `job.member_stalls`) is taken out, stopped and restarted the same way.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specpilot.errors import UserError
from specpilot.fleet.ops import STOP_TIMEOUT_S, replica_running, router_host, routers_running
from specpilot.fleet.router import RouterClient
from specpilot.fleet.spec import Fleet, Member, load_fleet
from specpilot.fleet.state import read_fleet, router_replicas, write_fleet
from specpilot.fleet.up import (
    ROUTER_START_TIMEOUT_S,
    Started,
    check_router_place,
    register,
    replica_entry,
    router_argvs,
    router_place,
    spawn_router_of,
    spec_digest,
)
from specpilot.hosts import open_host_section
from specpilot.hosts.base import Host
from specpilot.launch.ops import LEFTOVER_TERM_S, clear_leftovers, run_down, run_status
from specpilot.launch.recovery import Budget, Failure, next_start, run_failure
from specpilot.launch.server_plan import ServerPlan, plan_server
from specpilot.launch.state import state_path
from specpilot.launch.stop import end_group
from specpilot.launch.supervisor import launch
from specpilot.taskgroup import all_of

Say = Callable[[str], None]
#: how long a restart waits for a dead member's port to close before trying anyway
PORT_RELEASE_S = 10.0
PORT_POLL_S = 0.2


@dataclass
class Repair:
    name: str
    worker_url: str
    action: str  # "ok", "registered", "restarted", "gave_up"
    restarts: int = 0
    #: why it was last restarted, or why the restart failed
    cause: str | None = None
    #: the last failed start's own words (who holds the port, the fatal line, ...)
    error: str | None = None
    #: what the last restart changed (`launch.recovery`: the engine's bound after an OOM)
    bound: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RouterRepair:
    url: str
    action: str  # "ok", "restarted", "gave_up"
    target: str
    pid: int | None = None
    cause: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_recorded_fleet(name: str) -> Fleet:
    """The fleet `up` started, refused (exit 2) if its file, server spec or router changed."""
    record = read_fleet(name)
    fleet = load_fleet(record["fleet_file"])
    digests = record.get("member_digests") or []
    place, smg = router_place(fleet)
    # argv[0] is where `smg` was found, which may move; what it is told must not
    told = [argv[1:] for argv in router_argvs(fleet, smg)]
    same_router = place.target == record.get("router_target") and told == [
        (r.get("argv") or [])[1:] for r in router_replicas(record)
    ]
    if [spec_digest(m) for m in fleet.members] != digests or not same_router:
        raise UserError(
            f"{record['fleet_file']} or its server spec changed since `up`",
            field="NAME",
            fix=f"run `specpilot down {name}` and `specpilot up {record['fleet_file']}` to start the new one",
        )
    return fleet


async def wait_until_closed(host: Host, ports: list[int]) -> None:
    """Until nothing listens on `ports` on `host`, at most PORT_RELEASE_S: a killed process
    lets go of its sockets only once the kernel has torn it down."""
    deadline = time.monotonic() + PORT_RELEASE_S
    while time.monotonic() < deadline and any([await host.port_owner(port) for port in ports]):
        await asyncio.sleep(PORT_POLL_S)


async def clear_dead_routers(fleet: Fleet, record: dict[str, Any], dead: list[int]) -> None:
    """End what is left of each dead replica's process group, then wait (at most
    PORT_RELEASE_S) for its ports to close: a killed router's last process can still hold
    its port for a moment, and the checks before a restart would call the port taken."""
    replicas = router_replicas(record)
    host = router_host(record)
    try:
        for i in dead:
            pid = replicas[i].get("pid")
            if pid is not None:
                await end_group(
                    host, int(pid), term_timeout_s=LEFTOVER_TERM_S, start_ticks=replicas[i].get("start_ticks")
                )
        ports = [port for i in dead for port in fleet.router_ports[i]]
        await wait_until_closed(host, ports)
    finally:
        await host.close()


async def repair_routers(fleet: Fleet, say: Say, started: Started) -> list[RouterRepair]:
    """Start each router replica that is not running again; the engines are left as they are.

    Every check `up` makes comes first (UserError, nothing started): the host answers,
    `smg` there is new enough, the dead replicas' ports are free."""
    record = read_fleet(fleet.name)
    replicas = router_replicas(record)
    place, smg = router_place(fleet)
    alive = await routers_running(record)
    repairs = [RouterRepair(str(r["url"]), "ok", place.target, r.get("pid")) for r in replicas]
    dead = [i for i, up in enumerate(alive) if not up]
    if not dead:
        return repairs
    await clear_dead_routers(fleet, record, dead)
    await check_router_place(fleet, place, smg, dead)
    argvs = router_argvs(fleet, smg)
    record["routers"] = replicas
    async with aiohttp.ClientSession() as session:
        for i in dead:
            repair = repairs[i]
            say(f"router {repair.url} of {fleet.name} is not running; starting it again on {place.target}")
            process = await spawn_router_of(fleet, argvs[i], i, started)
            replicas[i] = replica_entry(repair.url, process, argvs[i])
            record["router_restarts"] = int(record.get("router_restarts") or 0) + 1
            write_fleet(record)
            repair.pid = process.pid
            try:
                await RouterClient(session, repair.url).wait_up(
                    functools.partial(replica_running, record, replicas[i]), ROUTER_START_TIMEOUT_S
                )
            except RuntimeError as err:
                repair.action, repair.cause = "gave_up", f"{err}; see {process.log_path} on {place.target}"
                say(f"router {repair.url}: {repair.cause}")
                continue
            repair.action = "restarted"
            say(f"router {repair.url} up again (pid {process.pid}); registering the serving members")
    return repairs


def check_known_workers(fleet: Fleet, listed: list[str]) -> None:
    """A worker the router lists that is no member: the fleet cannot account for its rows."""
    known = {m.worker_url for m in fleet.members}
    for url in listed:
        if url not in known:
            raise UserError(
                f"the router of fleet {fleet.name!r} lists {url}, which is not one of its members",
                field=f"{fleet.path}: [fleet] hosts",
                fix=f"add its host to the fleet file (then down and up), or remove it: "
                f"curl -X DELETE {fleet.router_url}/workers/ID (ID from GET /workers)",
            )


@dataclass
class FleetRepair:
    routers: list[RouterRepair]
    members: list[Repair]

    @property
    def router_action(self) -> str:
        """The replicas' together: gave_up if one did, restarted if one was, else ok."""
        actions = {r.action for r in self.routers}
        return next((a for a in ("gave_up", "restarted") if a in actions), "ok")

    @property
    def healthy(self) -> bool:
        return self.router_action != "gave_up" and all(r.action != "gave_up" for r in self.members)


async def clear_dead(member: Member) -> None:
    """End what a dead member's process group left behind, then wait (at most
    PORT_RELEASE_S) for its port to close: a killed engine lets go of its socket only once
    the kernel has torn the process down, and a start on a port still held is refused."""
    if state_path(member.name).exists():
        await clear_leftovers(member.name)
    host = open_host_section(member.spec.host)
    try:
        await wait_until_closed(host, [member.spec.server.port])
    finally:
        await host.close()


@dataclass
class Restarts:
    """What a member's restarts carry across passes (`--watch`, a job's healer): per member, the
    restarts made (a job's read back from job.json) and the server last started (a bound applied)."""

    made: dict[str, int] = field(default_factory=dict)
    servers: dict[str, ServerPlan] = field(default_factory=dict)


@dataclass
class MemberRestarts:
    """Restarting members of one fleet as `launch.recovery` says, within one budget."""

    fleet: Fleet
    routers: list[RouterClient]
    max_restarts: int
    backoff_s: float
    say: Say
    restarts: Restarts
    #: the plan per kind of GPU, made once per pass
    planned: dict[Any, ServerPlan] = field(default_factory=dict)
    #: each restart noted before it begins (`fleet.up.stop_fleet_started`)
    started: Started = field(default_factory=Started)

    async def again(self, member: Member, failure: Failure) -> Repair:
        """Start `member` (out of the routers, its process gone, its port free) again until it is
        ready and registered, or the policy gives up."""
        say = self.say
        repair = Repair(member.name, member.worker_url, "ok", self.restarts.made.get(member.name, 0))
        if member.gpu_key not in self.planned:
            self.planned[member.gpu_key] = await plan_server(member.spec)
        server = self.restarts.servers.get(member.name) or self.planned[member.gpu_key].for_member(
            member.spec
        )
        while True:
            budget = Budget(
                max_restarts=self.max_restarts, restarts=repair.restarts, backoff_s=self.backoff_s
            )
            recovery = await next_start(server, failure, budget)
            if recovery.action == "give_up":
                break
            await asyncio.sleep(recovery.backoff_s)
            repair.restarts += 1
            self.restarts.made[member.name] = repair.restarts
            server = self.restarts.servers[member.name] = recovery.server
            repair.bound, repair.cause, repair.error = recovery.change, failure.cause, None
            bound = f"; {recovery.bound.line()}" if recovery.bound is not None else ""
            which = f"restart {repair.restarts} of {self.max_restarts}"
            say(f"{member.name}: not serving ({failure.cause}); {which}{bound}")
            host = open_host_section(server.started.host)
            self.started.runs.append(member.name)
            try:
                result = await launch(server, host)
            finally:
                await host.close()
            if result.phase != "ready":
                repair.cause, repair.error = result.cause, result.error
                failure = Failure("start", result.cause or "unknown", (result.error or "").strip())
                continue
            problem = await register(self.routers, member.worker_url, self.fleet.router.ready_timeout_s)
            if problem is None:
                repair.action = "restarted"
                say(f"{member.name}: ready again and registered as {member.worker_url}")
                return repair
            repair.cause = problem
            failure = Failure("serving", "unregistered", problem)
        repair.action = "gave_up"
        said = f"{repair.cause}: {repair.error}" if repair.error else repair.cause
        say(f"{member.name}: left out after {repair.restarts} restarts ({said})")
        return repair


async def repair_fleet(
    fleet: Fleet,
    *,
    max_restarts: int,
    backoff_s: float,
    say: Say,
    restarts: Restarts | None = None,
    started: Started | None = None,
) -> FleetRepair:
    """One pass: the router, then every member, each restarted as `launch.recovery` says;
    each start noted in `started` first (`fleet.up.stop_fleet_started`)."""
    restarts = restarts if restarts is not None else Restarts()
    started = Started() if started is None else started
    router_repairs = await repair_routers(fleet, say, started)
    if any(r.action == "gave_up" for r in router_repairs):
        return FleetRepair(router_repairs, [])
    async with aiohttp.ClientSession() as session:
        routers = [RouterClient(session, url) for url in fleet.router_urls]
        restarter = MemberRestarts(fleet, routers, max_restarts, backoff_s, say, restarts, started=started)
        listings = [await router.workers() for router in routers]
        check_known_workers(fleet, [w.url for listed in listings for w in listed])
        # per replica, the members it lists ready
        ready = [{w.url for w in listed if w.status == "ready" and w.healthy} for listed in listings]

        async def one(member: Member) -> Repair:
            repair = Repair(member.name, member.worker_url, "ok", restarts.made.get(member.name, 0))
            serving = state_path(member.name).exists() and (await run_status(member.name, lines=0)).serving
            missing = [
                router
                for router, listed in zip(routers, ready, strict=True)
                if member.worker_url not in listed
            ]
            if serving and not missing:
                return repair
            if serving:
                problem = await register(missing, member.worker_url, fleet.router.ready_timeout_s)
                repair.action, repair.cause = (
                    ("registered", None) if problem is None else ("gave_up", problem)
                )
                say(f"{member.name}: serving but not routed; {problem or 'registered again'}")
                return repair
            failure = await run_failure(member.name)  # before its leftovers are cleared
            for router in routers:  # take it out before anything else
                await router.remove(member.worker_url)
            await clear_dead(member)
            return await restarter.again(member, failure)

        # a bug in one member's repair cancels the others' and is raised, named
        members = await all_of([(one(m), f"repairing member {m.name}") for m in fleet.members])
    return FleetRepair(router_repairs, members)


async def restart_stalled(
    fleet: Fleet,
    member: Member,
    why: str,
    *,
    max_restarts: int,
    backoff_s: float,
    say: Say,
    restarts: Restarts,
) -> Repair:
    """A member alive but stalled (requests running, no token progress: `job.member_stalls`): out
    of the routers first, stopped (the verified stop), then restarted as a dead one is, its
    restarts counted in the same budget (cause "stall")."""
    async with aiohttp.ClientSession() as session:
        routers = [RouterClient(session, url) for url in fleet.router_urls]
        for router in routers:
            await router.remove(member.worker_url)
        say(f"{member.name} stalled: {why}; taken out of the router, stopping it")
        stopped = await run_down(member.name, timeout_s=STOP_TIMEOUT_S)
        if stopped.get("phase") != "stopped":
            cause = (
                f"it could not be stopped ({stopped.get('stopped')}): see `specpilot status {member.name}`"
            )
            say(f"{member.name}: left out ({cause})")
            made = restarts.made.get(member.name, 0)
            return Repair(member.name, member.worker_url, "gave_up", made, cause="stall", error=cause)
        await clear_dead(member)
        restarter = MemberRestarts(fleet, routers, max_restarts, backoff_s, say, restarts)
        return await restarter.again(member, Failure("serving", "stall", why))
