"""`logs -f` follows a running engine's log until the run stops (a stand-in engine, real processes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from specpilot.launch.ops import run_down, stream_log
from specpilot.launch.state import read_state
from tests.launch.conftest import SpecFactory
from tests.launch.helpers import up

QUIET_S = 0.2
#: far beyond the quiet period: the old follower had ended long before this
WAIT_PAST_QUIET_S = 5 * QUIET_S
#: only so a broken follower fails the test instead of hanging it
GIVE_UP_S = 60.0


def test_follow_keeps_going_while_the_engine_runs_and_ends_when_it_stops(
    make_spec: SpecFactory, run_home: Path
) -> None:
    spec = make_spec("sglang_ready", name="follow-me")
    result = up(spec)
    assert result.phase == "ready", result.error
    log_path = Path(read_state(spec.name).log_path)

    async def follow_then_stop() -> bytes:
        seen = b""
        stream = stream_log(spec.name, follow=True, quiet_exit_s=QUIET_S)
        seen += await anext(stream)
        while b"ready to roll" not in seen:
            seen += await asyncio.wait_for(anext(stream), GIVE_UP_S)
        # the reader waits through several quiet periods while the engine stays up
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(WAIT_PAST_QUIET_S)
        with log_path.open("ab") as log:
            log.write(b"a line written after a quiet spell\n")
        seen += await asyncio.wait_for(waiting, GIVE_UP_S)
        while b"after a quiet spell" not in seen:
            seen += await asyncio.wait_for(anext(stream), GIVE_UP_S)
        await run_down(spec.name, timeout_s=10.0)
        # the process is gone: the stream ends on its own
        async with asyncio.timeout(GIVE_UP_S):
            async for chunk in stream:
                seen += chunk
        return seen

    try:
        followed = asyncio.run(follow_then_stop())
    finally:
        asyncio.run(run_down(spec.name, timeout_s=10.0))
    assert b"ready to roll" in followed and b"after a quiet spell" in followed
