"""The fleet file: one server spec, the hosts it runs on, and the router in front of them.

    [fleet]
    name = "qwen36-fleet"
    server = "qwen36-27b-mtp-sglang.toml"      # a server spec, relative to this file
    hosts = ["local", "ssh://ubuntu@10.0.0.5:22", { target = "gpu-b", gpus = 8 }]

    [router]                                    # optional; these are the defaults
    port = 30080
    policy = "least_load"

Each host runs one engine per `gpus // [gpu] count` (one when `gpus` is not given);
members are named `<fleet>-<i>` and are ordinary runs of `specpilot up`.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specpilot.errors import UserError
from specpilot.hosts.target import parse_target
from specpilot.spec import Spec, load_spec

#: policies that never stick to one worker: `cache_aware` keeps choosing the worker that
#: holds a prefix, and its retries can keep picking a dead one
POLICIES = ("least_load", "power_of_two", "round_robin", "random")
LOOPBACK_NAMES = ("localhost", "")
#: routers a fleet can run. smg 1.13's mesh (--enable-mesh) does not keep two routers' worker
#: lists in step (a worker removed and added again on one is never listed by the other,
#: which is what fleet-repair does to a restarted member), so each replica is an
#: independent router that up and fleet-repair register every member with; two is what is tested
MAX_ROUTER_REPLICAS = 2


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HostEntry(_Section):
    target: str = Field(description='"local", "ssh://user@host:port" or an ~/.ssh/config alias.')
    gpus: int | None = Field(None, ge=1, description="GPUs on the host: one engine per [gpu] count.")
    address: str | None = Field(None, description="Where the router reaches the host (default: its name).")
    gpu_memory_gib: float | None = Field(None, gt=0, description="This host's GPU memory, if not [gpu]'s.")
    gpu_name: str | None = Field(None, description="This host's GPU model, if not [gpu]'s.")


class FleetSection(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,55}$")
    server: str = Field(description="Path of the server spec every member runs.")
    hosts: list[str | HostEntry] = Field(min_length=1)


class RouterSection(_Section):
    target: str = Field("local", description='Where the router runs: "local" (this controller) or a host.')
    address: str | None = Field(
        None, description="Where the job reaches the router (default: target's name)."
    )
    smg: str | None = Field(
        None, description="`smg` on that host (default: $SPECPILOT_SMG or PATH; remote: smg)."
    )
    host: str = Field("127.0.0.1", description="Address the router binds.")
    port: int = Field(30080, ge=1, le=65535)
    metrics_port: int | None = Field(None, ge=1, le=65535, description="Prometheus port (default port + 1).")
    policy: Literal["least_load", "power_of_two", "round_robin", "random"] = "least_load"
    # client timeout (generate --request-timeout-s) > this > the longest generation
    request_timeout_s: int = Field(3600, ge=1)
    # a worker busy with a long prefill may answer /health slowly: a long timeout and
    # several failures in a row before it counts as down
    health_check_interval_s: int = Field(10, ge=1)
    health_check_timeout_s: int = Field(30, ge=1)
    health_failure_threshold: int = Field(3, ge=1)
    retries: int = Field(3, ge=1, description="Router attempts per request (1 = no retry).")
    ready_timeout_s: float = Field(120.0, gt=0, description="How long a worker may take to be listed ready.")
    replicas: int = Field(
        1, ge=1, description="Routers in front of the members (each on port + 2 i); the job fails over."
    )


class FleetFile(_Section):
    fleet: FleetSection
    router: RouterSection = Field(default_factory=RouterSection)


@dataclass(frozen=True)
class Member:
    """One engine of the fleet: an ordinary run of `specpilot up`."""

    index: int
    host_index: int  # position in [fleet] hosts, for messages
    spec: Spec
    address: str  # where the router reaches it

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def worker_url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.spec.server.port}"

    @property
    def gpu_key(self) -> tuple[float, str | None, int]:
        gpu = self.spec.gpu
        return (gpu.memory_gib, gpu.name, gpu.count)


@dataclass(frozen=True)
class Fleet:
    name: str
    path: Path
    server: Spec
    router: RouterSection
    members: tuple[Member, ...]

    @property
    def router_address(self) -> str:
        if self.router.address:
            return self.router.address
        if parse_target(self.router.target).kind != "local":
            return _address(HostEntry(target=self.router.target))
        return "127.0.0.1" if self.router.host in ("0.0.0.0", "::", "") else self.router.host

    @property
    def router_url(self) -> str:
        return self.router_urls[0]

    @property
    def router_urls(self) -> list[str]:
        host = self.router_address
        host = f"[{host}]" if ":" in host else host
        return [f"http://{host}:{port}" for port, _ in self.router_ports]

    @property
    def metrics_port(self) -> int:
        return self.router.metrics_port or self.router.port + 1

    @property
    def router_ports(self) -> list[tuple[int, int]]:
        """(port, metrics port) of each router replica: the next replica two ports up."""
        return [(self.router.port + 2 * i, self.metrics_port + 2 * i) for i in range(self.router.replicas)]


def _is_loopback(address: str) -> bool:
    if address in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _address(entry: HostEntry) -> str:
    if entry.address:
        return entry.address
    target = parse_target(entry.target)
    if target.kind == "local":
        return "127.0.0.1"
    return target.host or entry.target


def load_fleet(path: str | Path) -> Fleet:
    fleet_path = Path(path)
    try:
        data = tomllib.loads(fleet_path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"cannot read it ({err})", field=str(fleet_path), fix="pass a fleet .toml") from None
    return parse_fleet(data, fleet_path)


def is_fleet_file(path: str | Path) -> bool:
    """True for a TOML file with a [fleet] table (else `up` treats it as a server spec)."""
    try:
        return "fleet" in tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False


def parse_fleet(data: dict[str, Any], path: Path) -> Fleet:
    try:
        parsed = FleetFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(
            first["msg"], field=f"{path}: {where}", fix="see the [fleet] example in the README"
        ) from None
    server = load_spec(path.parent / parsed.fleet.server)
    entries = [HostEntry(target=h) if isinstance(h, str) else h for h in parsed.fleet.hosts]
    members = _members(parsed.fleet.name, server, entries, path)
    fleet = Fleet(parsed.fleet.name, path, server, parsed.router, tuple(members))
    _check_replicas(fleet)
    _check_router_reach(fleet)
    return fleet


def _check_replicas(fleet: Fleet) -> None:
    replicas = fleet.router.replicas
    if replicas > MAX_ROUTER_REPLICAS:
        raise UserError(
            f"replicas = {replicas}, but specpilot runs at most {MAX_ROUTER_REPLICAS} smg routers "
            "(smg 1.13's mesh does not keep more in step; each replica is registered on its own)",
            field=f"{fleet.path}: [router] replicas",
            fix=f"set replicas = {MAX_ROUTER_REPLICAS} or leave it out",
        )
    ports = [port for pair in fleet.router_ports for port in pair]
    if len(set(ports)) != len(ports) or max(ports) > 65535:
        raise UserError(
            f"router ports {ports} overlap or run past 65535 (replica i uses port + 2 i, metrics_port + 2 i)",
            field=f"{fleet.path}: [router] metrics_port",
            fix="leave metrics_port out (port + 1) or pick one clear of port .. port + 2 x replicas",
        )


def _check_router_reach(fleet: Fleet) -> None:
    """A router away from the controller must bind an outside address, and must not be
    handed members that only the controller's loopback reaches."""
    where = fleet.router_address
    if _is_loopback(where):
        return
    if _is_loopback(fleet.router.host):
        raise UserError(
            f"the router runs on {fleet.router.target} but binds {fleet.router.host}",
            field=f"{fleet.path}: [router] host",
            fix='set host = "0.0.0.0" so the job reaches it',
        )
    for member in fleet.members:
        if _is_loopback(member.address):
            raise UserError(
                f"{member.spec.host.target} is reached at {member.address}, the router host's own loopback",
                field=f"{fleet.path}: [fleet] hosts[{member.host_index}]",
                fix="give the host an address the router's host reaches (address = ...)",
            )


def _members(name: str, server: Spec, entries: list[HostEntry], path: Path) -> list[Member]:
    seen: dict[str, int] = {}
    members: list[Member] = []
    ports_used: dict[str, int] = {}  # address -> members there so far: each gets its own port
    for i, entry in enumerate(entries):
        field = f"{path}: [fleet] hosts[{i}]"
        target = parse_target(entry.target)
        key = "local" if target.kind == "local" else entry.target
        if key in seen:
            raise UserError(
                f"{entry.target} is listed twice (also hosts[{seen[key]}])",
                field=field,
                fix="list each host once; give it gpus = N to run several engines there",
            )
        seen[key] = i
        address = _address(entry)
        if not _is_loopback(address) and _is_loopback(server.server.host):
            raise UserError(
                f"the router reaches {entry.target} at {address}, but the server spec binds "
                f"{server.server.host}",
                field=f"{server.source_path}: [server] host",
                fix='set [server] host = "0.0.0.0" so the router can reach remote members',
            )
        count = server.gpu.count
        engines = 1
        if entry.gpus is not None:
            if entry.gpus < count:
                raise UserError(
                    f"{entry.gpus} GPUs, but one engine needs [gpu] count = {count}",
                    field=f"{field} gpus",
                    fix=f"give gpus >= {count} or leave the host out",
                )
            engines = entry.gpus // count
        gpu = server.gpu.model_copy(
            update={
                k: v
                for k, v in (("memory_gib", entry.gpu_memory_gib), ("name", entry.gpu_name))
                if v is not None
            }
        )
        for j in range(engines):
            slot = ports_used.get(address, 0)
            ports_used[address] = slot + 1
            port = server.server.port + slot
            if port > 65535:
                raise UserError("too many engines for the ports above [server] port", field=field)
            env = dict(server.engine.env)
            if entry.gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(j * count, (j + 1) * count))
            spec = server.model_copy(
                update={
                    "name": f"{name}-{len(members)}",
                    "gpu": gpu,
                    "host": server.host.model_copy(update={"target": entry.target}),
                    "server": server.server.model_copy(update={"port": port}),
                    "engine": server.engine.model_copy(update={"env": env}),
                }
            )
            members.append(Member(len(members), i, spec, address))
    return members
