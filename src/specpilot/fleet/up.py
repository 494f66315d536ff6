"""`specpilot up FLEET.toml`: plan per GPU type, check, start every member, then the router.

Nothing starts before every input is known good (hosts reachable, plans fit, router
ports free, `smg` new enough). Members start in parallel through the same verified
`launch` as a single `up`; each is registered with the router once ready, and one
that fails is reported with its cause and never registered. An interrupt stops
everything started so far: in the loop as it unwinds, then once more from what `Started`
noted before each start (`stop_fleet_started`), by each one's run token.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specpilot.errors import SpecpilotError, UserError
from specpilot.fleet.router import (
    RouterClient,
    RouterProcess,
    find_smg,
    router_argv,
    smg_version,
    spawn_router,
)
from specpilot.fleet.spec import Fleet, Member
from specpilot.fleet.state import fleet_path, fleets_folder, read_fleet, write_fleet
from specpilot.hosts import open_host_section
from specpilot.hosts.errors import HostError
from specpilot.hosts.target import parse_target
from specpilot.launch.ops import run_down
from specpilot.launch.server_plan import ServerPlan, plan_server
from specpilot.launch.shield import STOP_TERM_S, signals_blocked, stop_started
from specpilot.launch.state import host_options_json
from specpilot.launch.stop import end_group, new_run_token
from specpilot.launch.supervisor import launch
from specpilot.spec import HostSection
from specpilot.taskgroup import all_of, each_of

#: how long `up` waits for a host to answer a first command
REACH_TIMEOUT_S = 30.0
ROUTER_START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0

Say = Callable[[str], None]


@dataclass
class Started:
    """What one command starts, each noted before its start: the member runs (`launch`
    records each one's token before its spawn) and the router replicas' run tokens. After an
    interrupt `stop_fleet_started` stops exactly these, an engine or router whose pid never
    came back included."""

    runs: list[str] = field(default_factory=list)
    router_tokens: list[str] = field(default_factory=list)


async def stop_fleet_started(fleet: Fleet, started: Started) -> list[str]:
    """Stop every member run and router replica in `started`, by their run tokens, with the
    ending signals blocked; a line for each thing left running."""
    left = await stop_started(started.runs)  # waits for this process's helpers first
    if not started.router_tokens:
        return left
    with signals_blocked():
        host = open_host_section(router_place(fleet)[0])
        try:
            for token in started.router_tokens:  # pid 0: found by the token alone
                stopped = await end_group(host, 0, term_timeout_s=STOP_TERM_S, token=token)
                if stopped.survivors:
                    survivors = " ".join(map(str, stopped.survivors))
                    left.append(f"router of {fleet.name}: pid {survivors} survived SIGKILL")
        finally:
            await host.close()
    return left


@dataclass
class MemberOutcome:
    name: str
    target: str
    worker_url: str
    phase: str  # "registered" or "failed"
    cause: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FleetOutcome:
    name: str
    router_url: str
    members: list[MemberOutcome] = field(default_factory=list)

    @property
    def registered(self) -> int:
        return sum(1 for m in self.members if m.phase == "registered")


async def preflight_per_gpu(fleet: Fleet, say: Say) -> dict[tuple[float, str | None, int], ServerPlan]:
    """check + plan once per distinct GPU (the model read in this loop); a plan that does not
    fit names its hosts."""
    plans: dict[tuple[float, str | None, int], ServerPlan] = {}
    for member in fleet.members:
        key = member.gpu_key
        if key in plans:
            continue
        server = await plan_server(member.spec)
        pre = server.preflight
        hosts = sorted({m.host_index for m in fleet.members if m.gpu_key == key})
        where = ", ".join(f"hosts[{i}]" for i in hosts)
        for warning in pre.warnings:
            say(f"warning ({where}): {warning}")
        if pre.errors:
            fix = (
                pre.fix.describe()
                if pre.fix and pre.fix.describe()
                else "change the server spec or leave these hosts out"
            )
            raise UserError(
                f"{pre.errors[0]} (GPU {key[1] or '?'} {key[0]:g} GiB)",
                field=f"{fleet.path}: [fleet] {where}",
                fix=fix,
            )
        plans[key] = server
    return plans


def check_port_free(host: str, port: int, field: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        # as the router binds: a port left in TIME_WAIT by a killed router is free to it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise UserError(
                f"{host}:{port} is not free ({err.strerror})", field=field, fix="choose another port"
            ) from None


async def check_reachable(fleet: Fleet) -> None:
    """Every host answers a first command, before anything starts."""

    async def reach(member: Member) -> None:
        host = open_host_section(member.spec.host)
        try:
            async with asyncio.timeout(REACH_TIMEOUT_S):
                await host.run(["true"])
        except UserError as err:
            raise UserError(
                f"{member.spec.host.target} is unreachable: {err}",
                field=f"{fleet.path}: [fleet] hosts[{member.host_index}]",
                fix="check the address, the SSH key and that sshd runs there, or leave the host out",
            ) from None
        except (OSError, TimeoutError) as err:
            raise UserError(
                f"{member.spec.host.target} is unreachable ({type(err).__name__}: {err})",
                field=f"{fleet.path}: [fleet] hosts[{member.host_index}]",
                fix="check the address, the SSH key and that sshd runs there, or leave the host out",
            ) from None
        finally:
            await host.close()

    first_per_host = {m.host_index: m for m in reversed(fleet.members)}
    await all_of([(reach(m), f"reaching {m.spec.host.target}") for m in first_per_host.values()])


async def check_members_not_running(fleet: Fleet) -> None:
    """A member left running by an earlier `up` would hold its port: refuse, name it."""
    from specpilot.launch.ops import run_status
    from specpilot.launch.state import read_state, state_path

    for member in fleet.members:
        if not state_path(member.name).exists():
            continue
        if read_state(member.name).phase not in ("starting", "ready"):
            continue
        status = await run_status(member.name, lines=0)
        if status.alive:
            raise UserError(
                f"member {member.name} is already running (pid {status.pid} on {status.target})",
                field="[fleet] name",
                fix=f"stop it with `specpilot down {fleet.name}` (or `down {member.name}`) first, "
                f"or restart only the router with `specpilot fleet-repair {fleet.name}`",
            )


def router_place(fleet: Fleet) -> tuple[HostSection, str]:
    """(host, smg executable) of the router: the controller by default, reached as the
    server spec's [host] says."""
    local = parse_target(fleet.router.target).kind == "local"
    smg = fleet.router.smg or (find_smg() if local else "smg")
    return fleet.server.host.model_copy(update={"target": fleet.router.target}), smg


async def check_router_place(
    fleet: Fleet, place: HostSection, smg: str, replicas: list[int] | None = None
) -> None:
    """`smg` there and new enough, the ports of `replicas` (default all) free (the bind test
    locally, the listeners remotely)."""
    target = place.target
    host = open_host_section(place)
    try:
        try:
            await smg_version(host, smg)
        except (HostError, OSError, TimeoutError) as err:
            raise UserError(
                f"{target} is unreachable: {err}",
                field=f"{fleet.path}: [router] target",
                fix="check the address, the SSH key and that sshd runs there",
            ) from None
        ports = [pair for i, pair in enumerate(fleet.router_ports) if replicas is None or i in replicas]
        pairs = [(port, "port") for port, _ in ports] + [(metrics, "metrics_port") for _, metrics in ports]
        for port, field in pairs:
            where = f"{fleet.path}: [router] {field}"
            if target == "local":
                check_port_free(fleet.router.host, port, where)
            elif await host.port_owner(port) is not None:
                raise UserError(f"port {port} on {target} is in use", field=where, fix="choose another port")
    finally:
        await host.close()


def router_argvs(fleet: Fleet, smg: str) -> list[list[str]]:
    """One `smg launch` per replica."""
    return [router_argv(smg, fleet.router, metrics, port) for port, metrics in fleet.router_ports]


async def check_inputs(
    fleet: Fleet, say: Say
) -> tuple[list[list[str]], dict[tuple[float, str | None, int], ServerPlan]]:
    """Everything that can refuse, before anything starts: UserError (exit 2)."""
    if fleet_path(fleet.name).exists():
        from specpilot.fleet.ops import router_running

        if await router_running(read_fleet(fleet.name)):
            raise UserError(
                f"fleet {fleet.name!r} is already up",
                field="[fleet] name",
                fix=f"stop it with `specpilot down {fleet.name}` first",
            )
    await check_members_not_running(fleet)
    place, smg = router_place(fleet)
    await check_router_place(fleet, place, smg)
    plans = await preflight_per_gpu(fleet, say)
    await check_reachable(fleet)
    return router_argvs(fleet, smg), plans


async def register(routers: list[RouterClient], url: str, timeout_s: float) -> str | None:
    """Add `url` to every replica; on any problem it is left on none (and why is returned)."""
    for router in routers:
        problem = await router.add(url, timeout_s)
        if problem is not None:
            for other in routers:
                await other.remove(url)
            return f"{router.url}: {problem}" if len(routers) > 1 else problem
    return None


async def _start_member(
    member: Member,
    server: ServerPlan,
    routers: list[RouterClient],
    timeout_s: float,
    say: Say,
    started: Started,
) -> MemberOutcome:
    outcome = MemberOutcome(member.name, member.spec.host.target, member.worker_url, "failed")
    host = open_host_section(member.spec.host)
    started.runs.append(member.name)
    try:
        result = await launch(server.for_member(member.spec), host)
    except SpecpilotError as err:  # its host went away mid-start: this member only
        outcome.cause, outcome.error = "host", str(err)[-400:]
        say(f"{member.name} on {outcome.target}: {err}; left out")
        return outcome
    finally:
        await host.close()
    if result.phase != "ready":
        outcome.cause, outcome.error = result.cause, (result.error or "")[-400:]
        say(f"{member.name} on {outcome.target}: failed ({result.cause}); left out")
        return outcome
    problem = await register(routers, member.worker_url, timeout_s)
    if problem is not None:
        await run_down(member.name, timeout_s=STOP_TIMEOUT_S)
        outcome.cause, outcome.error = "not_registered", problem
        say(f"{member.name}: {problem}; stopped and left out")
        return outcome
    outcome.phase = "registered"
    say(f"{member.name} on {outcome.target}: ready, registered as {member.worker_url}")
    return outcome


def spec_digest(member: Member) -> str:
    """What `up` started for this member: `fleet-repair` refuses to start anything else."""
    return hashlib.sha256(member.spec.model_dump_json().encode()).hexdigest()


def replica_entry(url: str, process: RouterProcess, argv: list[str]) -> dict[str, Any]:
    return {
        "url": url,
        "pid": process.pid,
        "start_ticks": process.start_ticks,
        "token": process.token,
        "log": process.log_path,
        "exit": process.exit_path,
        "argv": argv,
    }


def fleet_record(fleet: Fleet, processes: list[RouterProcess], argvs: list[list[str]]) -> dict[str, Any]:
    place, _ = router_place(fleet)
    return {
        "name": fleet.name,
        "fleet_file": str(fleet.path.resolve()),
        "router_url": fleet.router_url,
        "router_target": place.target,
        "router_host_options": host_options_json(place),
        "routers": [
            replica_entry(url, process, argv)
            # a start cut short records the replicas it spawned (none: the first failed)
            for url, process, argv in zip(fleet.router_urls[: len(processes)], processes, argvs, strict=True)
        ],
        "ready_timeout_s": fleet.router.ready_timeout_s,
        "members": [
            {"name": m.name, "target": m.spec.host.target, "worker_url": m.worker_url} for m in fleet.members
        ],
        "member_digests": [spec_digest(m) for m in fleet.members],
        "outcomes": [],
        "started_at": time.time(),
    }


def replica_name(fleet: Fleet, index: int) -> str:
    """Names its log and pid files: the fleet's for the first, `<fleet>.r<i>` for the others."""
    return fleet.name if index == 0 else f"{fleet.name}.r{index}"


async def spawn_router_of(fleet: Fleet, argv: list[str], index: int, started: Started) -> RouterProcess:
    """Start replica `index` of the fleet's router where `[router] target` says; its log
    beside the fleet record, its run token in `started` before the spawn."""
    place, _ = router_place(fleet)
    token = new_run_token()
    started.router_tokens.append(token)
    host = open_host_section(place)
    try:
        log_dir = (
            str(fleet_path(fleet.name).parent)
            if place.target == "local"
            else f"{await host.home()}/.specpilot/fleets"
        )
        return await spawn_router(host, argv, log_dir, replica_name(fleet, index), token)
    finally:
        await host.close()


async def _spawn_replicas(
    fleet: Fleet, argvs: list[list[str]], say: Say, started: Started
) -> list[RouterProcess]:
    """Every replica, or none: one that cannot be spawned stops those already started."""
    processes: list[RouterProcess] = []
    try:
        for index, argv in enumerate(argvs):
            processes.append(await spawn_router_of(fleet, argv, index, started))
    except BaseException:
        partial = fleet_record(fleet, processes, argvs[: len(processes)])
        await _stop_everything(fleet, partial, say)
        raise
    return processes


async def fleet_up(fleet: Fleet, say: Say, started: Started | None = None) -> FleetOutcome:
    """Check everything, start the router replicas and every member, register the ready ones;
    nothing is left running when no member became ready (or on an error). Each start is
    noted in `started` first (`stop_fleet_started`)."""
    started = Started() if started is None else started
    argvs, plans = await check_inputs(fleet, say)
    fleets_folder()  # where its record goes can be written: else nothing is started
    record = fleet_record(fleet, await _spawn_replicas(fleet, argvs, say, started), argvs)
    write_fleet(record)
    try:
        outcome = await _bring_up(fleet, record, plans, say, started)
    except BaseException:
        await _stop_everything(fleet, record, say)
        raise
    record["outcomes"] = [o.to_json() for o in outcome.members]
    write_fleet(record)
    if not outcome.registered:
        await _stop_everything(fleet, record, say)
    return outcome


async def _bring_up(
    fleet: Fleet, record: dict[str, Any], plans: dict[Any, ServerPlan], say: Say, started: Started
) -> FleetOutcome:
    from specpilot.fleet.ops import replica_running

    async with aiohttp.ClientSession() as session:
        routers = [RouterClient(session, url) for url in fleet.router_urls]
        for router, replica in zip(routers, record["routers"], strict=True):
            try:
                await router.wait_up(
                    functools.partial(replica_running, record, replica), ROUTER_START_TIMEOUT_S
                )
            except RuntimeError as err:
                raise UserError(
                    f"{err}; see {replica['log']} on {record['router_target']}",
                    field=f"{fleet.path}: [router]",
                    fix="fix what the router log says, then run up again",
                ) from None
        urls = ", ".join(fleet.router_urls)
        say(f"router {urls} ({fleet.router.policy}) up; starting {len(fleet.members)} members")
        # a bug in one start cancels the others (each stops what it started) and is raised
        outcomes = await all_of(
            [
                (
                    _start_member(m, plans[m.gpu_key], routers, fleet.router.ready_timeout_s, say, started),
                    f"starting member {m.name}",
                )
                for m in fleet.members
            ]
        )
    return FleetOutcome(fleet.name, fleet.router_url, outcomes)


async def _stop_everything(fleet: Fleet, record: dict[str, Any], say: Say) -> None:
    """Stop every member started, then the router. A member whose host does not answer is
    named with what to do; a bug is raised once every stop was tried."""
    from specpilot.fleet.ops import stop_router
    from specpilot.launch.state import state_path

    async def down(member: Member) -> None:
        if not state_path(member.name).exists():
            return
        try:
            await run_down(member.name, timeout_s=STOP_TIMEOUT_S)
        except SpecpilotError as err:  # its host went away: the others must still be stopped
            say(f"{member.name}: not stopped ({err}); stop it with `specpilot down {member.name}`")

    try:
        await each_of([(down(m), f"stopping member {m.name}") for m in fleet.members])
    finally:
        await stop_router(record)
