"""`status`, `logs`, `down` and `fleet-repair` on a fleet's name."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specpilot.errors import SpecpilotError, UserError
from specpilot.fleet.router import RouterClient, Worker, running
from specpilot.fleet.state import fleet_path, read_fleet, write_fleet
from specpilot.hosts import open_host_section
from specpilot.hosts.base import Host
from specpilot.hosts.errors import HostError
from specpilot.launch.ops import run_down, run_status
from specpilot.launch.state import DamagedState, host_from_json, state_path
from specpilot.launch.stop import stop_group
from specpilot.taskgroup import all_of, each_of

STOP_TIMEOUT_S = 30.0


def router_host(record: dict[str, Any]) -> Host:
    try:
        place = host_from_json(record.get("router_target", "local"), record.get("router_host_options"))
    except DamagedState as err:
        path = fleet_path(str(record.get("name")))
        raise UserError(
            f"{path}: the router's host is damaged ({err})",
            field="NAME",
            fix=f"stop the router by hand and delete {path}, then start the fleet again",
        ) from None
    return open_host_section(place)


async def router_running(record: dict[str, Any]) -> bool:
    pid = record.get("router_pid")
    if pid is None:
        return False
    host = router_host(record)
    try:
        return await running(host, int(pid), record.get("router_start_ticks"))
    except HostError:
        return False  # its host does not answer: the router is not usable either
    finally:
        await host.close()


async def stop_router(record: dict[str, Any]) -> str:
    """SIGTERM its group, SIGKILL after STOP_TIMEOUT_S; a STOP_OUTCOMES key."""
    pid = record.get("router_pid")
    if pid is None:
        return "not_running"
    host = router_host(record)
    try:
        return await stop_group(
            host, int(pid), term_timeout_s=STOP_TIMEOUT_S, start_ticks=record.get("router_start_ticks")
        )
    finally:
        await host.close()


def router_alive(name: str) -> bool:
    return asyncio.run(router_running(read_fleet(name)))


@dataclass
class MemberStatus:
    name: str
    target: str
    worker_url: str
    serving: bool
    registered: bool
    phase: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FleetStatus:
    name: str
    router_url: str
    router_alive: bool
    router_target: str
    members: list[MemberStatus] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.router_alive and any(m.serving and m.registered for m in self.members)

    @property
    def repair(self) -> str | None:
        """What `fleet-repair` would do about the router, when it is down."""
        if self.router_alive:
            return None
        serving = sum(1 for m in self.members if m.serving)
        dead = len(self.members) - serving
        then = f", and restart the {dead} not serving" if dead else ""
        return (
            f"`specpilot fleet-repair {self.name}` starts the router again on {self.router_target} and "
            f"registers the {serving} serving members (their engines keep running){then}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "router_url": self.router_url,
            "router_alive": self.router_alive,
            "router_target": self.router_target,
            "repair": self.repair,
            "members": [m.to_json() for m in self.members],
        }


async def _router_workers(url: str) -> list[Worker]:
    try:
        async with aiohttp.ClientSession() as session:
            return await RouterClient(session, url).workers()
    except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError):
        return []


async def fleet_status(name: str) -> FleetStatus:
    record = read_fleet(name)
    router_up = await router_running(record)
    workers = await _router_workers(record["router_url"]) if router_up else []
    ready = {w.url for w in workers if w.status == "ready" and w.healthy}

    async def one(member: dict[str, Any]) -> MemberStatus:
        serving, phase = False, "not started"
        if state_path(member["name"]).exists():
            try:
                status = await run_status(member["name"], lines=0)
                serving, phase = status.serving, status.phase
            except SpecpilotError:
                phase = "unreachable"
        return MemberStatus(
            member["name"],
            member["target"],
            member["worker_url"],
            serving,
            member["worker_url"] in ready,
            phase,
        )

    members = await all_of([(one(m), f"reading member {m['name']}'s status") for m in record["members"]])
    return FleetStatus(name, record["router_url"], router_up, str(record.get("router_target")), members)


async def fleet_down(name: str) -> dict[str, Any]:
    """Stop the router first (no request reaches a stopping member), then every member."""
    record = read_fleet(name)
    router = await stop_router(record)

    async def down(member: dict[str, Any]) -> dict[str, Any]:
        if not state_path(member["name"]).exists():
            return {"name": member["name"], "phase": "not started", "stopped": "not_running"}
        try:
            return await run_down(member["name"], timeout_s=STOP_TIMEOUT_S)
        except SpecpilotError as err:  # one unreachable host must not keep the others running
            return {
                "name": member["name"],
                "phase": "stop_failed",
                "stopped": "unreachable",
                "error": str(err),
            }

    # every member is stopped even when one stop hits a bug (raised after the others)
    members = await each_of([(down(m), f"stopping member {m['name']}") for m in record["members"]])
    record["stopped_at"] = time.time()
    write_fleet(record)
    return {"name": name, "router": router, "members": members}


async def router_log(name: str) -> bytes:
    record = read_fleet(name)
    host = router_host(record)
    try:
        return await host.read_bytes(str(record["router_log"]))
    finally:
        await host.close()
