"""A command's one event loop, which the first ending signal ends as Ctrl-C ends a command
(`specpilot.interrupts` says how the loop takes the signals)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

from specpilot.interrupts import received, taken_by

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), which the first ending signal ends as Ctrl-C ends a command, in order:
    `main` is cancelled (and with it every task it awaits), then KeyboardInterrupt is raised
    once the loop has ended. A later signal is recorded and otherwise ignored, so it cannot
    cut a cleanup short; one an inner taker took ends `main` as that taker decides."""
    cancelled = False

    async def cancellable() -> T:
        task = asyncio.current_task()
        assert task is not None

        def cancel(signum: signal.Signals) -> None:
            nonlocal cancelled
            if len(received()) == 1:
                cancelled = True
                task.cancel()

        with taken_by(cancel):
            return await main

    try:
        result = asyncio.run(cancellable())
    except BaseException as err:
        if cancelled:  # whatever the unwinding raised: the signal ended the command
            raise KeyboardInterrupt from err
        raise
    if cancelled:  # something swallowed the cancellation: the signal still ends the command
        raise KeyboardInterrupt
    return result
