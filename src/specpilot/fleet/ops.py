"""`status`, `logs`, `down` and `fleet-repair` on a fleet's name."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specpilot.errors import SpecpilotError, UserError
from specpilot.fleet.router import RouterClient, Worker, exit_path_of, running
from specpilot.fleet.state import fleet_path, read_fleet, router_replicas, write_fleet
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


async def replica_running(record: dict[str, Any], replica: dict[str, Any]) -> bool:
    pid = replica.get("pid")
    if pid is None:
        return False
    host = router_host(record)
    try:
        return await running(host, int(pid), replica.get("start_ticks"))
    except HostError:
        return False  # its host does not answer: the router is not usable either
    finally:
        await host.close()


async def routers_running(record: dict[str, Any]) -> list[bool]:
    """Per replica: is its recorded process still running."""
    return [await replica_running(record, r) for r in router_replicas(record)]


async def replica_exit_status(record: dict[str, Any], replica: dict[str, Any]) -> int | None:
    """How a replica that is not running ended, as its own start's watcher recorded it
    (None: no record yet, or its host does not answer)."""
    path = exit_path_of(replica)
    if path is None:
        return None
    host = router_host(record)
    try:
        return await host.exit_status(path)
    except HostError:
        return None
    finally:
        await host.close()


async def router_running(record: dict[str, Any]) -> bool:
    """Some replica runs (the job has a router to send to)."""
    return any(await routers_running(record))


async def stop_router(record: dict[str, Any]) -> str:
    """SIGTERM each replica's group, SIGKILL after STOP_TIMEOUT_S; a STOP_OUTCOMES key (the
    worst of the replicas')."""
    outcomes = []
    host = router_host(record)
    try:
        for replica in router_replicas(record):
            if replica.get("pid") is None:
                outcomes.append("not_running")
                continue
            outcomes.append(
                await stop_group(
                    host,
                    int(replica["pid"]),
                    term_timeout_s=STOP_TIMEOUT_S,
                    start_ticks=replica.get("start_ticks"),
                    token=replica.get("token"),
                )
            )
    finally:
        await host.close()
    # no replica recorded (the first did not spawn): nothing was running
    return next((o for o in outcomes if o == "survived"), outcomes[0] if outcomes else "not_running")


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
    router_target: str
    routers: dict[str, bool]  # each replica's URL -> running
    members: list[MemberStatus] = field(default_factory=list)
    #: each replica not running -> its exit status as its watcher recorded it (None: not yet)
    router_exits: dict[str, int | None] = field(default_factory=dict)

    @property
    def router_alive(self) -> bool:
        """Every replica runs."""
        return all(self.routers.values())

    @property
    def healthy(self) -> bool:
        return self.router_alive and any(m.serving and m.registered for m in self.members)

    @property
    def repair(self) -> str | None:
        """What `fleet-repair` would do about the router, when one is down."""
        down = [url for url, alive in self.routers.items() if not alive]
        if not down:
            return None
        serving = sum(1 for m in self.members if m.serving)
        dead = len(self.members) - serving
        then = f", and restart the {dead} not serving" if dead else ""
        which = "the router" if len(self.routers) == 1 else f"router {', '.join(down)}"
        return (
            f"`specpilot fleet-repair {self.name}` starts {which} again on {self.router_target} and "
            f"registers the {serving} serving members (their engines keep running){then}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "router_url": self.router_url,
            "router_alive": self.router_alive,
            "router_target": self.router_target,
            "routers": [
                {"url": url, "alive": alive, "exit_status": self.router_exits.get(url)}
                for url, alive in self.routers.items()
            ],
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
    replicas = router_replicas(record)
    routers = dict(zip([str(r["url"]) for r in replicas], await routers_running(record), strict=True))
    exits = {
        str(r["url"]): await replica_exit_status(record, r) for r in replicas if not routers[str(r["url"])]
    }
    # registered: listed ready by every running replica
    listings = [await _router_workers(url) for url, alive in routers.items() if alive]
    ready = (
        set.intersection(*({w.url for w in ws if w.status == "ready" and w.healthy} for ws in listings))
        if listings
        else set()
    )

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
    return FleetStatus(name, record["router_url"], str(record.get("router_target")), routers, members, exits)


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
    """Every replica's log, one after the other, each line through the mask `logs` puts an
    engine's log through (a router logs its workers' URLs and its own argv)."""
    from specpilot.secrets import mask_log_text

    record = read_fleet(name)
    replicas = router_replicas(record)
    host = router_host(record)
    try:
        raw = [await host.read_bytes(str(r["log"])) for r in replicas]
    finally:
        await host.close()
    logs = [
        b"".join(
            mask_log_text(line.decode(errors="replace")).encode() for line in log.splitlines(keepends=True)
        )
        for log in raw
    ]
    if len(logs) == 1:
        return logs[0]
    return b"".join(f"# router {r['url']}\n".encode() + log for r, log in zip(replicas, logs, strict=True))
