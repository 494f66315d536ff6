"""Following a log with a timeout on each wait.

Why a queue between the reader and the consumer: `Host.follow` is an async generator,
and a timeout on `anext()` cancels it (a cancelled async generator is finished), so a
consumer that waits with a timeout must not wait on the generator itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from specpilot.hosts.base import Host
from specpilot.taskgroup import beside


@asynccontextmanager
async def followed(host: Host, path: str, offset: int) -> AsyncIterator[asyncio.Queue[bytes | BaseException]]:
    """A queue of the file's bytes from `offset` on, as they are appended; an error of the
    reader (the host went away) arrives in the queue as the exception itself."""
    chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue()

    async def read() -> None:
        try:
            async for chunk in host.follow(path, offset):
                await chunks.put(chunk)
        except Exception as err:
            await chunks.put(err)

    async with beside(read, f"following {path} on {host.target}"):
        yield chunks


async def next_chunk(chunks: asyncio.Queue[bytes | BaseException], timeout_s: float) -> bytes | None:
    """The next bytes, None when none came within `timeout_s`; the reader's error is raised."""
    # asyncio.timeout, not wait_for: on 3.11 wait_for returns an item that arrives as the
    # caller is cancelled and drops the cancel, and a follower loop then never ends
    try:
        async with asyncio.timeout(max(0.0, timeout_s)):
            item = await chunks.get()
    except TimeoutError:
        return None
    if isinstance(item, BaseException):
        raise item
    return item
