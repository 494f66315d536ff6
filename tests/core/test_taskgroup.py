"""The task helpers: every failure is raised (a bug named, specpilot's own errors as they
are), `all_of` cancels the rest at the first failure, `each_of` lets every work end, and
`beside` cancels its body when its work fails but leaves the body's own error alone."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from specpilot.errors import UserError
from specpilot.taskgroup import SeveralFailed, TaskFailed, all_of, beside, each_of


async def _fail(err: Exception) -> int:
    await asyncio.sleep(0)
    raise err


def test_all_of_names_a_bug_and_cancels_the_others() -> None:
    cancelled: list[str] = []

    async def slow() -> int:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        return 0

    async def go() -> list[int]:
        return await all_of([(slow(), "waiting"), (_fail(KeyError("k")), "member 1")])

    with pytest.raises(TaskFailed, match="member 1 failed: KeyError: 'k'"):
        asyncio.run(go())
    assert cancelled == ["slow"]


def test_all_of_results_in_order_and_own_errors_as_they_are() -> None:
    async def value(v: int) -> int:
        await asyncio.sleep(0)
        return v

    assert asyncio.run(all_of([(value(1), "a"), (value(2), "b")])) == [1, 2]
    refused = UserError("bad", field="[x] y", fix="change it")

    async def go() -> list[int]:
        return await all_of([(_fail(refused), "a")])

    with pytest.raises(UserError) as raised:
        asyncio.run(go())
    assert raised.value is refused


def test_each_of_lets_every_work_end_then_raises_the_first_failure() -> None:
    ended: list[str] = []

    async def stop(name: str) -> int:
        await asyncio.sleep(0.01)
        ended.append(name)
        return 0

    async def go() -> list[int]:
        return await each_of([(_fail(RuntimeError("bug")), "stop a"), (stop("b"), "stop b")])

    with pytest.raises(TaskFailed, match="stop a failed: RuntimeError: bug"):
        asyncio.run(go())
    assert ended == ["b"]


def test_beside_cancels_its_body_when_its_work_fails() -> None:
    body: list[str] = []

    async def work() -> None:
        raise ValueError("sampler bug")

    async def go() -> None:
        async with beside(work, "the sampler"):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                body.append("cancelled")
                raise

    with pytest.raises(TaskFailed, match="the sampler failed: ValueError: sampler bug"):
        asyncio.run(go())
    assert body == ["cancelled"]


def test_beside_leaves_the_body_error_and_result_alone() -> None:
    runs: list[int] = []

    async def work() -> None:
        while True:
            runs.append(1)
            await asyncio.sleep(0)

    refused = UserError("disk full", field="--output")

    async def failing() -> None:
        async with beside(work, "the sampler"):
            await asyncio.sleep(0.01)
            raise refused

    with pytest.raises(UserError) as raised:
        asyncio.run(failing())
    assert raised.value is refused and runs

    async def fine() -> str:
        async with beside(work, "the sampler"):
            await asyncio.sleep(0)
        return "done"

    assert asyncio.run(fine()) == "done"


def test_beside_whose_body_ends_at_once_makes_no_coroutine_it_never_awaits() -> None:
    """A body that ends before the work's task took its first step (a job with nothing to
    send): the work is not even called, so no coroutine of it is left unawaited."""
    made: list[str] = []

    async def work() -> None:
        made.append("ran")

    def make() -> Coroutine[Any, Any, None]:
        made.append("made")
        return work()

    async def at_once() -> None:
        async with beside(make, "the sampler"):
            pass

    asyncio.run(at_once())
    assert made == []


def test_each_of_raises_every_failure_in_one_line() -> None:
    """Once only the first failure was raised: a fleet `down` with two failed members said one."""
    refused = UserError("host unreachable", field="[host] target", fix="check ssh")

    async def go() -> list[int]:
        return await each_of(
            [
                (_fail(RuntimeError("bug")), "stop a"),
                (_fail(refused), "stop b"),
                (_fail(OSError(28, "full")), "stop c"),
            ]
        )

    with pytest.raises(SeveralFailed) as raised:
        asyncio.run(go())
    line = str(raised.value)
    assert line.startswith("3 failed: stop a failed: RuntimeError: bug")
    assert "stop b: [host] target: host unreachable (check ssh)" in line and "stop c: [Errno 28] full" in line
    assert raised.value.exit_code == 2 and raised.value.failures[1] is refused
