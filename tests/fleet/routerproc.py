"""A real `smg` router on 127.0.0.1 with stand-in OpenAI servers registered (tests, bench)."""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

from specpilot.fleet.router import RouterClient, RouterProcess, router_argv, running, spawn_router
from specpilot.fleet.spec import RouterSection
from specpilot.hosts.local import LocalHost
from specpilot.launch.stop import stop_group
from tests.fixtures.ports import free_port

REGISTER_TIMEOUT_S = 30.0


def router_call(url: str, method: str, *args: object) -> object:
    async def go() -> object:
        async with aiohttp.ClientSession() as session:
            return await getattr(RouterClient(session, url), method)(*args)

    return asyncio.run(go())


@contextmanager
def running_router(smg: str, worker_urls: list[str], **settings: object) -> Iterator[str]:
    """Start `smg launch` as `up` does, register every worker, yield the router URL."""
    router = RouterSection.model_validate({"port": free_port(), "health_check_interval_s": 1, **settings})
    process = asyncio.run(start_router(router_argv(smg, router, free_port())))
    url = f"http://127.0.0.1:{router.port}"
    try:
        for worker in worker_urls:
            problem = router_call(url, "add", worker, REGISTER_TIMEOUT_S)
            assert problem is None, f"{problem}\n{Path(process.log_path).read_text()[-2000:]}"
        yield url
    finally:
        asyncio.run(stop_group(LocalHost(), process.pid, term_timeout_s=10, start_ticks=process.start_ticks))


async def start_router(argv: list[str]) -> RouterProcess:
    """Spawned and answering GET /workers."""
    host = LocalHost()
    process = await spawn_router(
        host, argv, tempfile.mkdtemp(prefix="smg-log-"), "test", secrets.token_hex(16)
    )
    port = argv[argv.index("--port") + 1]
    async with aiohttp.ClientSession() as session:
        await RouterClient(session, f"http://127.0.0.1:{port}").wait_up(
            lambda: running(host, process.pid, process.start_ticks), 30.0
        )
    return process
