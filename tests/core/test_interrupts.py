"""loop.run: the first ending signal cancels the command's task, every task's cleanup
runs to its end (a second signal cannot cut it short), and KeyboardInterrupt comes once the
loop has ended; an inner taker takes the signals while it is in place; the handlers before
come back."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from specpilot import interrupts
from specpilot.cli import loop


def send(signum: int) -> None:
    # to this thread: a signal sent to the process may be taken by another thread earlier tests left
    signal.pthread_kill(threading.get_ident(), signum)


def test_the_first_signal_cancels_every_task_and_a_second_does_not_cut_their_cleanup_short() -> None:
    before = {signum: signal.getsignal(signum) for signum in interrupts.ENDING_SIGNALS}
    cleaned: list[str] = []

    async def request() -> None:
        try:
            send(signal.SIGHUP)  # mid-step: a handler that raised would raise here
            await asyncio.sleep(60)
        finally:  # a cleanup that awaits, until the loop took a second signal
            send(signal.SIGTERM)
            async with asyncio.timeout(10):
                while len(interrupts.received()) < 2:
                    await asyncio.sleep(0)
            cleaned.append("request")

    async def main() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(request())
            group.create_task(asyncio.sleep(60))

    interrupts.forget()
    with pytest.raises(KeyboardInterrupt):
        loop.run(main())
    assert cleaned == ["request"]
    assert interrupts.received() == [signal.SIGHUP, signal.SIGTERM]
    assert {signum: signal.getsignal(signum) for signum in interrupts.ENDING_SIGNALS} == before


def test_an_inner_taker_takes_the_signals_while_it_is_in_place() -> None:
    taken: list[signal.Signals] = []

    async def main() -> str:
        arrived = asyncio.Event()
        with interrupts.taken_by(lambda signum: (taken.append(signum), arrived.set())):
            send(signal.SIGINT)
            await asyncio.wait_for(arrived.wait(), 10)  # the loop hands it over between steps
        return "finished"

    interrupts.forget()
    assert loop.run(main()) == "finished"
    assert taken == [signal.SIGINT]
