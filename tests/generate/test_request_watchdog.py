"""The request timeout (dispatch/watchdog.py): requests older than it are cancelled, once, and
their attempt knows the cancel was the timeout's."""

from __future__ import annotations

import asyncio

from specpilot.generate.dispatch.client import FailureKind
from specpilot.generate.dispatch.servers import Server
from specpilot.generate.dispatch.watchdog import LOOK_EVERY_S, RequestWatchdog

LIMIT_S = 30.0


async def _requests(server: Server, count: int) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(count)]
    server.in_flight.update(enumerate(tasks))
    return tasks


def test_only_requests_older_than_the_limit_are_cancelled_and_only_once() -> None:
    async def main() -> None:
        server = Server("http://127.0.0.1:1")
        old, young = await _requests(server, 2)
        watchdog = RequestWatchdog(LIMIT_S, {0: 0.0, 1: 100.0})
        watchdog.look(0.0, [server])  # the first look sets the clock
        watchdog.look(LIMIT_S + 1, [server])
        assert watchdog.overdue == {0}
        await asyncio.sleep(0)
        assert (old.cancelled(), young.done()) == (True, False)
        watchdog.look(LIMIT_S + 1 + LOOK_EVERY_S, [server])  # still overdue: not cancelled again
        assert watchdog.overdue == {0}
        young.cancel()

    asyncio.run(main())


def test_the_watchdog_looks_at_most_once_a_second() -> None:
    async def main() -> None:
        server = Server("http://127.0.0.1:1")
        (task,) = await _requests(server, 1)
        watchdog = RequestWatchdog(LIMIT_S, {0: 0.0})
        watchdog.look(LIMIT_S + 1, [server])
        watchdog.look(LIMIT_S + 1 + LOOK_EVERY_S / 2, [server])
        assert watchdog.overdue == set()
        watchdog.look(LIMIT_S + 1 + LOOK_EVERY_S, [server])
        assert watchdog.overdue == {0}
        task.cancel()

    asyncio.run(main())


def test_an_attempt_learns_once_that_its_cancel_was_the_timeout() -> None:
    watchdog = RequestWatchdog(LIMIT_S, {})
    watchdog.overdue.add(7)
    assert (watchdog.settle(7), watchdog.settle(7), watchdog.settle(8)) == (True, False, False)
    failure = watchdog.timeout()
    assert (failure.kind, str(failure)) == (FailureKind.TIMEOUT, "request timed out after 30 s")
