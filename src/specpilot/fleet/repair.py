"""`specpilot fleet-repair NAME`: find dead members, restart them, register them again.

A member that is not serving is first taken out of the router (no request goes to it),
then started again on its host with the same verified files (`launch` ships and checks
them as `up` did), at most `max_restarts` times with doubling backoff, and registered
again once ready (delete, then add: the router keeps stale state for a restarted
address). A member serving but missing from the router is registered again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from specpilot.errors import UserError
from specpilot.fleet.ops import router_alive
from specpilot.fleet.router import RouterClient
from specpilot.fleet.spec import Fleet, Member, load_fleet
from specpilot.fleet.state import read_fleet
from specpilot.fleet.up import spec_digest
from specpilot.hosts import open_host_section
from specpilot.launch.ops import run_status
from specpilot.launch.preflight import Preflight, launch_spec, run_preflight
from specpilot.launch.state import state_path
from specpilot.launch.supervisor import launch
from specpilot.taskgroup import all_of

Say = Callable[[str], None]


@dataclass
class Repair:
    name: str
    worker_url: str
    action: str  # "ok", "registered", "restarted", "gave_up"
    restarts: int = 0
    cause: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_recorded_fleet(name: str) -> Fleet:
    record = read_fleet(name)
    if not router_alive(name):
        raise UserError(
            f"the router of fleet {name!r} is not running",
            field="NAME",
            fix=f"start the fleet again with `specpilot up {record['fleet_file']}`",
        )
    fleet = load_fleet(record["fleet_file"])
    digests = record.get("member_digests") or []
    if [spec_digest(m) for m in fleet.members] != digests:
        raise UserError(
            f"{record['fleet_file']} or its server spec changed since `up`",
            field="NAME",
            fix=f"run `specpilot down {name}` and `specpilot up {record['fleet_file']}` to start the new one",
        )
    return fleet


async def repair_fleet(
    fleet: Fleet, *, max_restarts: int, backoff_s: float, say: Say, restarts: dict[str, int] | None = None
) -> list[Repair]:
    """One pass over every member; `restarts` carries the counts across passes (--watch)."""
    restarts = restarts if restarts is not None else {}
    preflights: dict[Any, Preflight] = {}
    async with aiohttp.ClientSession() as session:
        router = RouterClient(session, fleet.router_url)
        ready = {w.url for w in await router.workers() if w.status == "ready" and w.healthy}

        async def one(member: Member) -> Repair:
            repair = Repair(member.name, member.worker_url, "ok", restarts.get(member.name, 0))
            serving = state_path(member.name).exists() and (await run_status(member.name, lines=0)).serving
            if serving and member.worker_url in ready:
                return repair
            if serving:
                problem = await router.add(member.worker_url, fleet.router.ready_timeout_s)
                repair.action, repair.cause = (
                    ("registered", None) if problem is None else ("gave_up", problem)
                )
                say(f"{member.name}: serving but not routed; {problem or 'registered again'}")
                return repair
            await router.remove(member.worker_url)  # take it out before anything else
            if member.gpu_key not in preflights:
                preflights[member.gpu_key] = run_preflight(member.spec)
            pre = preflights[member.gpu_key]
            while repair.restarts < max_restarts:
                if repair.restarts:
                    await asyncio.sleep(backoff_s * 2 ** (repair.restarts - 1))
                repair.restarts += 1
                restarts[member.name] = repair.restarts
                say(f"{member.name}: not serving; restart {repair.restarts} of {max_restarts}")
                host = open_host_section(member.spec.host)
                try:
                    result = await launch(launch_spec(member.spec, pre), host, plan=pre.plan)
                finally:
                    await host.close()
                if result.phase != "ready":
                    repair.cause = result.cause
                    continue
                problem = await router.add(member.worker_url, fleet.router.ready_timeout_s)
                if problem is None:
                    repair.action, repair.cause = "restarted", None
                    say(f"{member.name}: ready again and registered as {member.worker_url}")
                    return repair
                repair.cause = problem
            repair.action = "gave_up"
            say(f"{member.name}: left out after {repair.restarts} restarts ({repair.cause})")
            return repair

        # a bug in one member's repair cancels the others' and is raised, named
        return await all_of([(one(m), f"repairing member {m.name}") for m in fleet.members])
