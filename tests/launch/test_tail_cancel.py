"""A follower cancelled just as a log chunk arrives must end.

On Python 3.11, `asyncio.wait_for` returns an item that completes in the same loop turn
as the caller's cancel and drops the cancel; the crash watcher of `generate --run` then
looped forever and the finished job never exited (the server's request log lines arrive
exactly when the job cancels its watcher).
"""

from __future__ import annotations

import asyncio

import pytest

from specpilot.launch.tail import next_chunk


@pytest.mark.parametrize("turns_before_cancel", [0, 1, 2, 3])
def test_cancel_as_a_chunk_arrives_is_not_lost(turns_before_cancel: int) -> None:
    async def scenario() -> None:
        chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        waiting = asyncio.create_task(next_chunk(chunks, 30.0))
        await asyncio.sleep(0)  # the task now waits on the queue
        chunk = b"INFO: 127.0.0.1 - POST /v1/chat/completions 200\n"
        chunks.put_nowait(chunk)
        for _ in range(turns_before_cancel):
            await asyncio.sleep(0)
        if waiting.cancel():  # accepted: the task must end cancelled, never with the chunk
            with pytest.raises(asyncio.CancelledError):
                await waiting
        else:  # it had already returned the chunk
            assert waiting.result() == chunk

    asyncio.run(scenario())


def test_timeout_still_returns_none() -> None:
    async def scenario() -> bytes | None:
        chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        return await next_chunk(chunks, 0.01)

    assert asyncio.run(scenario()) is None
