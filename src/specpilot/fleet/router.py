"""The SGLang model gateway (`smg`, https://github.com/lightseekorg/smg) as specpilot runs it.

specpilot starts `smg launch` on the controller with no workers and registers each
member once it is ready, through the gateway's control API (smg 1.13):
`POST /workers {"url": ...}` (queued; the worker is listed once probed),
`GET /workers` (each with `id`, `url`, `status`, `is_healthy`) and
`DELETE /workers/{id}`. `/readiness` answers 503 while no worker is healthy.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.errors import UserError
from specpilot.fleet.spec import RouterSection

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


def smg_version(smg: str) -> tuple[int, ...]:
    """`smg --version` ("smg 1.13.0") as numbers; UserError if too old to have the API."""
    try:
        out = subprocess.run(
            [smg, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(
            f"{smg} --version failed ({err})", field="[router]", fix=f"pip install {SMG_PIN}"
        ) from None
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


def router_argv(smg: str, router: RouterSection, metrics_port: int) -> list[str]:
    """No workers at start: each is registered once `up` has seen it ready."""
    return [
        smg,
        "launch",
        "--host",
        router.host,
        "--port",
        str(router.port),
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


def spawn_router(argv: Sequence[str], log_path: Path) -> int:
    """Start the router in its own session (it outlives `up`); returns its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    return process.pid


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

    async def wait_up(self, pid: int, timeout_s: float) -> None:
        """Until GET /workers answers; RuntimeError if the process exits first."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.workers()
                return
            except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError):
                pass
            if not alive(pid):
                raise RuntimeError("the router exited during start")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the router did not answer within {timeout_s:g} s")
            await asyncio.sleep(POLL_S)

    async def add(self, url: str, timeout_s: float) -> str | None:
        """Register `url` and wait until the router lists it ready and healthy.

        Returns None when it is, else why not (then nothing of it is left registered)."""
        await self.remove(url)  # a restarted address: the router keeps stale state for the old one
        status, data = await self._json("POST", "/workers", {"url": url})
        if status not in (200, 201, 202):
            return f"POST /workers answered {status}: {str(data)[:200]}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for worker in await self.workers():
                if worker.url == url and worker.status == "ready" and worker.healthy:
                    return None
            await asyncio.sleep(POLL_S)
        await self.remove(url)
        return f"the router did not list {url} as ready within {timeout_s:g} s"

    async def remove(self, url: str) -> int:
        """Deregister every entry for `url`; returns how many there were."""
        entries = [w for w in await self.workers() if w.url == url]
        for worker in entries:
            await self._json("DELETE", f"/workers/{worker.id}")
        return len(entries)


def start_ticks(pid: int) -> int | None:
    """The process's start time (/proc/PID/stat field 22): (pid, start) names it for good."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child not yet reaped) is not alive
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
