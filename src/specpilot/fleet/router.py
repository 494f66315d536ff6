"""The SGLang model gateway (`smg`, https://github.com/lightseekorg/smg) as specpilot runs it.

specpilot starts `smg launch` on the controller with no workers and registers each
member once it is ready, through the gateway's control API (smg 1.13):
`POST /workers {"url": ...}` (queued; the worker is listed once probed),
`GET /workers` (each with `id`, `url`, `status`, `is_healthy`) and
`DELETE /workers/{id}` (also queued: the entry is listed until it is carried out, and a
POST for its URL meanwhile answers 409). `/readiness` answers 503 while no worker is healthy.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.errors import UserError
from specpilot.fleet.spec import RouterSection
from specpilot.hosts.base import Host
from specpilot.launch.stop import RUN_TOKEN_VAR

SMG_ENV = "SPECPILOT_SMG"
#: the first release with the `/workers` control API this module uses
MIN_SMG_VERSION = (1, 13)
SMG_PIN = "smg==1.13.0"
ADMIN_TIMEOUT_S = 10.0
POLL_S = 0.2


def find_smg() -> str:
    """The `smg` executable: $SPECPILOT_SMG, else `smg` on PATH."""
    found = os.environ.get(SMG_ENV) or shutil.which("smg")
    if not found or not Path(found).is_file():
        raise UserError(
            "the SGLang model gateway `smg` is not installed",
            field="[router]",
            fix=f"pip install {SMG_PIN} (or set ${SMG_ENV} to its path)",
        )
    return found


async def smg_version(host: Host, smg: str) -> tuple[int, ...]:
    """`smg --version` ("smg 1.13.0") on the router's host; UserError if missing or too old."""
    result = await host.run([smg, "--version"], check=False, timeout_s=30.0)
    out = result.stdout.decode(errors="replace")
    if result.returncode == 127:
        raise UserError(
            f"`{smg}` is not installed on {host.target}",
            field="[router] smg",
            fix=f"pip install {SMG_PIN} there, or set [router] smg to its path",
        )
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    version = tuple(int(part) for part in match.groups() if part is not None) if match else ()
    if version < MIN_SMG_VERSION:
        shown = ".".join(map(str, version)) or repr(out.strip()[:40])
        raise UserError(
            f"smg {shown} has no /workers control API (needs >= 1.13)",
            field="[router]",
            fix=f"pip install {SMG_PIN}",
        )
    return version


def router_argv(smg: str, router: RouterSection, metrics_port: int, port: int | None = None) -> list[str]:
    """No workers at start: each is registered once `up` has seen it ready. `port`: a
    replica's (default [router] port)."""
    return [
        smg,
        "launch",
        "--host",
        router.host,
        "--port",
        str(port or router.port),
        "--policy",
        router.policy,
        "--prometheus-host",
        router.host,
        "--prometheus-port",
        str(metrics_port),
        "--request-timeout-secs",
        str(router.request_timeout_s),
        "--health-check-interval-secs",
        str(router.health_check_interval_s),
        "--health-check-timeout-secs",
        str(router.health_check_timeout_s),
        "--health-failure-threshold",
        str(router.health_failure_threshold),
        "--retry-max-retries",
        str(router.retries),
        # the job bounds what is in flight; the router's own cap would answer 429 past it
        "--max-concurrent-requests",
        "0",
        "--log-level",
        "warn",
    ]


@dataclass(frozen=True)
class RouterProcess:
    """The router's process on its host: (pid, start_ticks) names it for good; its run token
    (in its environment) marks it and its children, as a member's does (`launch.stop`)."""

    pid: int
    start_ticks: int | None
    log_path: str
    exit_path: str
    token: str


def exit_path_of(replica: dict[str, Any]) -> str | None:
    """Where a replica's watcher records how it ended: the recorded path, else (a record
    written before per-start exit files) the one file the log's name implied."""
    recorded = replica.get("exit")
    if isinstance(recorded, str):
        return recorded
    log = replica.get("log")
    if isinstance(log, str) and log.endswith(".router.log"):
        return log.removesuffix(".log") + ".exit"
    return None


async def spawn_router(host: Host, argv: Sequence[str], log_dir: str, name: str, token: str) -> RouterProcess:
    """Start the router in its own session on `host` (it outlives `up`), marked by the run
    token `token`."""
    await host.run(["mkdir", "-p", "-m", "700", log_dir])
    env = {**await _login_env(host), RUN_TOKEN_VAR: token}
    log_path = f"{log_dir}/{name}.router.log"
    # one exit file per start: the watcher of an earlier router under this name that reaps it
    # late (a zombie when the name was reused) writes its own file, never this start's
    exit_path = f"{log_dir}/{name}.router.exit-{secrets.token_hex(8)}"
    pid = await host.spawn_detached(
        list(argv),
        env=env,
        cwd=log_dir,
        log_path=log_path,
        pid_path=f"{log_dir}/{name}.router.pid",
        exit_path=exit_path,
    )
    stat = await host.proc_stat(pid)
    return RouterProcess(pid, None if stat is None else stat.start_ticks, log_path, exit_path, token)


async def running(host: Host, pid: int, start_ticks: int | None) -> bool:
    """The recorded router process is still this one, and not a zombie."""
    stat = await host.proc_stat(pid)
    return stat is not None and stat.state not in ("Z", "X") and stat.start_ticks == start_ticks


async def _login_env(host: Host) -> dict[str, str]:
    """The host's own environment (PATH, HOME, ...): spawn_detached inherits nothing."""
    if host.target == "local":
        return dict(os.environ)
    result = await host.run(["env", "-0"], check=False, timeout_s=30.0)
    env = {}
    for item in result.stdout.split(b"\0"):
        name, eq, value = item.decode(errors="replace").partition("=")
        if eq:
            env[name] = value
    return env


@dataclass(frozen=True)
class Worker:
    id: str
    url: str
    status: str
    healthy: bool


class RouterClient:
    """The router's control API over one aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url.rstrip("/")

    async def _json(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(
            method, self.url + path, json=body, timeout=aiohttp.ClientTimeout(total=ADMIN_TIMEOUT_S)
        ) as response:
            return response.status, await response.json(content_type=None)

    async def workers(self) -> list[Worker]:
        status, data = await self._json("GET", "/workers")
        if status != 200 or not isinstance(data, dict):
            raise RuntimeError(f"GET /workers answered {status}")
        return [
            Worker(str(w["id"]), str(w["url"]), str(w.get("status")), bool(w.get("is_healthy")))
            for w in data.get("workers", [])
        ]

    async def wait_up(self, is_running: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
        """Until GET /workers answers; RuntimeError if the process exits first."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.workers()
                return
            except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError):
                pass
            if not await is_running():
                raise RuntimeError("the router exited during start")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the router did not answer within {timeout_s:g} s")
            await asyncio.sleep(POLL_S)

    async def add(self, url: str, timeout_s: float) -> str | None:
        """Register `url` and wait until the router lists it ready and healthy.

        Returns None when it is, else why not (then nothing of it is left registered)."""
        deadline = time.monotonic() + timeout_s
        await self.remove(url)  # a restarted address: the router keeps stale state for the old one
        while True:
            status, data = await self._json("POST", "/workers", {"url": url})
            # 409 "already exists": a removal the router has queued but not yet carried out
            if status != 409 or time.monotonic() > deadline:
                break
            await asyncio.sleep(POLL_S)
        if status not in (200, 201, 202):
            return f"POST /workers answered {status}: {str(data)[:200]}"
        while time.monotonic() < deadline:
            for worker in await self.workers():
                if worker.url == url and worker.status == "ready" and worker.healthy:
                    return None
            await asyncio.sleep(POLL_S)
        await self.remove(url)
        return f"the router did not list {url} as ready within {timeout_s:g} s"

    async def remove(self, url: str) -> int:
        """Deregister every entry for `url` and wait (at most ADMIN_TIMEOUT_S) until the
        router lists none: it queues a DELETE and carries it out later. Returns how many
        entries there were."""
        entries = [w for w in await self.workers() if w.url == url]
        for worker in entries:
            await self._json("DELETE", f"/workers/{worker.id}")
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while entries and time.monotonic() < deadline:
            if all(w.url != url for w in await self.workers()):
                break
            await asyncio.sleep(POLL_S)
        return len(entries)
