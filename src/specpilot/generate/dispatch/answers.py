"""A row's finished turns made into its output row: written to its split, counted, and watched
for what the answers say of the server (no `usage`, no reasoning where thinking is on) and of
the dataset they make (the yield guard)."""

from __future__ import annotations

import time
from collections.abc import Callable

from specpilot.generate.dispatch.stats import LiveStats
from specpilot.generate.rows.output import TurnResult, build_row
from specpilot.generate.rows.thinking import ReasoningWatch
from specpilot.generate.rows.types import PromptRow
from specpilot.generate.rows.validate import flag_bits
from specpilot.generate.sampling import Sampling
from specpilot.generate.writers.parts import CLEAN, FLAGGED, PartWriter, Split
from specpilot.generate.yields import YieldGuard

#: the stop reason while the guard's message waits for the rows in flight (`Job` words it after)
GUARD_STOP = "yield guard"


class Answers:
    """Where answered rows go: one writer per split, and the live counters."""

    def __init__(
        self,
        model: str,
        sampling: Sampling,
        keep_given_turns: bool,
        writers: dict[Split, PartWriter],
        stats: LiveStats,
        say: Callable[[str], None],
        stop: Callable[[str], None],
        guard: YieldGuard | None = None,
        drain: Callable[[str], None] | None = None,
    ) -> None:
        """`say`: a warning for the user; `stop(reason)`: end the job (answers without reasoning);
        `guard` sees every row, and `drain(reason)` ends the job once it fires (the rows in flight
        still finish)."""
        self.model, self.thinking, self.keep_given_turns = model, sampling.thinking, keep_given_turns
        self.writers, self.stats, self._say, self._stop = writers, stats, say, stop
        self.guard, self._drain = guard, drain
        self.reasoning = ReasoningWatch(model, thinking=sampling.thinking)
        self.usage_missing_said = False  # the warning of answers without `usage`, said once

    def add(self, row: PromptRow, done: list[TurnResult]) -> None:
        """Write the row (durable at the next flush) and count it."""
        output = build_row(
            row, done, model=self.model, thinking=self.thinking, keep_given_turns=self.keep_given_turns
        )
        meta = output["meta"]
        for result in done:
            self._watch(result)
        self.writers[FLAGGED if meta["flags"] else CLEAN].add(
            output,
            row.position,
            meta["prompt_tokens"],
            meta["completion_tokens"],
            flag_bits(meta["flags"]),
            time.time(),
        )
        # One row, however many turns: the last turn's server, the time its requests took.
        latency_s = sum(result.latency_s for result in done)
        self.stats.answered(done[-1].server, latency_s, meta["prompt_tokens"], meta["completion_tokens"])
        self.stats.flagged_by.update(meta["flags"])
        if self.guard is not None and self._drain is not None and self.guard.observe(meta):
            self._drain(GUARD_STOP)

    def buffered(self) -> int:
        """Rows written and not flushed yet."""
        return sum(len(writer) for writer in self.writers.values())

    def _watch(self, result: TurnResult) -> None:
        answer = result.answer
        if answer.usage_missing and not self.usage_missing_said:
            self.usage_missing_said = True
            self._say(
                f"warning: server {result.server} answers without `usage`: those rows record 0 "
                "prompt and completion tokens (the rates, `report` and --max-length read them); "
                "SGLang and vLLM send it, so a proxy in between may drop it"
            )
        no_reasoning = self.reasoning.observe(answer.reasoning, answer.finish_reason)
        if no_reasoning is not None:
            self._stop(no_reasoning)
        if answer.spec_accept_length is not None:
            self.stats.accept_length_sum += answer.spec_accept_length
            self.stats.accept_length_rows += 1
