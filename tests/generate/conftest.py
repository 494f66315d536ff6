"""Fixtures for the generate tests: a fault-injecting fake server and input writers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.generate.fake_server import FakeServer, Faults


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer(Faults()).start()
    yield server
    server.close()


@contextlib.contextmanager
def scripted_server(chat: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Iterator[int]:
    """A server on 127.0.0.1 answering /v1/chat/completions with `chat` (from a background
    thread's loop); yields its port."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    asyncio.run_coroutine_threadsafe(runner.setup(), loop).result()
    asyncio.run_coroutine_threadsafe(web.TCPSite(runner, "127.0.0.1", 0).start(), loop).result()
    try:
        yield runner.addresses[0][1]
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def prompt_rows(count: int, *, prefix: str = "q") -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "conversations": [{"role": "user", "content": f"{prefix} {i}"}]}
        for i in range(count)
    ]


def read_output(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for part in sorted((directory / "data").glob("part-*.jsonl")):
        rows += [json.loads(line) for line in part.read_text().splitlines()]
    return rows
