"""A real `smg` router on 127.0.0.1 with stand-in OpenAI servers registered (tests, bench)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

from specpilot.fleet.router import RouterClient, router_argv, spawn_router
from specpilot.fleet.spec import RouterSection

REGISTER_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def router_call(url: str, method: str, *args: object) -> object:
    async def go() -> object:
        async with aiohttp.ClientSession() as session:
            return await getattr(RouterClient(session, url), method)(*args)

    return asyncio.run(go())


@contextmanager
def running_router(smg: str, worker_urls: list[str], **settings: object) -> Iterator[str]:
    """Start `smg launch` as `up` does, register every worker, yield the router URL."""
    router = RouterSection.model_validate({"port": free_port(), "health_check_interval_s": 1, **settings})
    log = Path(tempfile.mkdtemp(prefix="smg-log-")) / "router.log"
    pid = spawn_router(router_argv(smg, router, free_port()), log)
    url = f"http://127.0.0.1:{router.port}"
    try:
        asyncio.run(_wait_up(url, pid))
        for worker in worker_urls:
            problem = router_call(url, "add", worker, REGISTER_TIMEOUT_S)
            assert problem is None, f"{problem}\n{log.read_text()[-2000:]}"
        yield url
    finally:
        os.killpg(pid, signal.SIGTERM)
        os.waitpid(pid, 0)


async def _wait_up(url: str, pid: int) -> None:
    async with aiohttp.ClientSession() as session:
        await RouterClient(session, url).wait_up(pid, 30.0)
