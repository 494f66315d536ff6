"""`status`, `logs`, `down` and `fleet-repair` on a fleet's name."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.fleet.router import RouterClient, Worker, alive, start_ticks
from specpilot.fleet.state import read_fleet, write_fleet
from specpilot.hosts.local import LocalHost
from specpilot.launch.ops import run_down, run_status
from specpilot.launch.state import state_path
from specpilot.launch.stop import stop_group

STOP_TIMEOUT_S = 30.0


def router_alive(name: str) -> bool:
    record = read_fleet(name)
    pid = record.get("router_pid")
    return pid is not None and alive(int(pid)) and start_ticks(int(pid)) == record.get("router_start_ticks")


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
    members: list[MemberStatus] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.router_alive and any(m.serving and m.registered for m in self.members)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "router_url": self.router_url,
            "router_alive": self.router_alive,
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
    router_up = router_alive(name)
    workers = await _router_workers(record["router_url"]) if router_up else []
    ready = {w.url for w in workers if w.status == "ready" and w.healthy}

    async def one(member: dict[str, Any]) -> MemberStatus:
        serving, phase = False, "not started"
        if state_path(member["name"]).exists():
            status = await run_status(member["name"], lines=0)
            serving, phase = status.serving, status.phase
        return MemberStatus(
            member["name"],
            member["target"],
            member["worker_url"],
            serving,
            member["worker_url"] in ready,
            phase,
        )

    members = await asyncio.gather(*(one(m) for m in record["members"]))
    return FleetStatus(name, record["router_url"], router_up, list(members))


async def fleet_down(name: str) -> dict[str, Any]:
    """Stop the router first (no request reaches a stopping member), then every member."""
    record = read_fleet(name)
    pid = record.get("router_pid")
    router = "not_running"
    if pid is not None:
        router = await stop_group(
            LocalHost(), int(pid), term_timeout_s=STOP_TIMEOUT_S, start_ticks=record.get("router_start_ticks")
        )

    async def down(member: dict[str, Any]) -> dict[str, Any]:
        if not state_path(member["name"]).exists():
            return {"name": member["name"], "phase": "not started", "stopped": "not_running"}
        return await run_down(member["name"], timeout_s=STOP_TIMEOUT_S)

    members = await asyncio.gather(*(down(m) for m in record["members"]))
    record["stopped_at"] = time.time()
    write_fleet(record)
    return {"name": name, "router": router, "members": list(members)}


def router_log(name: str) -> Path:
    return Path(read_fleet(name)["router_log"])
