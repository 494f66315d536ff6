"""A job's yield: which rows reach the dataset, why the others do not, and the guard that
stops a job early when its rows cannot make a dataset.

Every flagged row is left out of the exports (unless asked for), so a row's flags decide
its fate. Each flagged row is counted under one cause, the first of `CAUSES` among its
flags (an answer cut while thinking is also empty and without reasoning: it was cut), so
the causes add up to the flagged rows.

The guard (`YieldGuard`) sees every row a run finishes. Once the run has finished enough
rows to judge (`YieldFloor.rows_to_judge`: --guard-min-rows, at least 2% of the input), it
compares the Wilson upper bound of the clean share (`GUARD_Z`: 99% two-sided) with the
floor, so a few unlucky rows do not stop a job: only a job whose clean yield is under the
floor even at the bound's most hopeful is stopped. The run then sends nothing new, lets
the rows in flight finish and commit, and ends with the cause, the numbers and the fix.

For truncation the fix is a max_tokens from the answers' lengths (`propose_budget`): one
that covers their p99 within what the context leaves after the longest prompt. An answer
cut at max_tokens says only that it is at least that long (censored), so where more than
1% of the answers were cut the true p99 is unknown and only bounded from below.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specpilot.errors import UserError


@dataclass(frozen=True)
class Cause:
    """Why a row does not reach the dataset: its name (job.json's key), the flags it covers, and
    what to do about it (`{again}`: how to run the job again); None: the fix is measured
    (`fix_for`: truncation's, from the answers' lengths)."""

    name: str
    says: str
    flags: tuple[str, ...]
    fix: str | None


CAUSES: tuple[Cause, ...] = (
    Cause(
        "truncated", "cut at max_tokens", ("truncated",), None,
    ),
    Cause(
        "repetitive", "repetitive (the answer loops)", ("repetitive",),
        "the model loops: send a presence or repetition penalty (--presence-penalty 1.5; "
        "[job.sampling] presence_penalty = 1.5) or sample at a higher temperature, and check the "
        "model's weights and chat template; then run {again}",
    ),
    Cause(
        "missing_reasoning", "without reasoning although thinking is on", ("missing_reasoning",),
        "start the server with its reasoning parser (`--reasoning-parser qwen3` for Qwen3.x; "
        "`specpilot check` names it), or turn thinking off for a model that does not think "
        "(--no-thinking; [job.sampling] thinking = false), then run {again}",
    ),
    Cause(
        "empty_content", "with an empty answer", ("empty_content",),
        "the answers come back empty: check the model's chat template and the server's reasoning "
        "parser (an answer all taken for reasoning is empty), then run {again}",
    ),
    Cause(
        "other_flags", "with another flag (think markers left, no finish_reason)", (),
        "see `specpilot report` for the flags, fix their cause, then run {again}",
    ),
)  # fmt: skip
CAUSE_NAMES: tuple[str, ...] = tuple(c.name for c in CAUSES)


def cause_named(name: str) -> Cause:
    """The cause of `CAUSES` by its name."""
    return next(c for c in CAUSES if c.name == name)


def floor_setting(job: bool) -> str:
    """Where the clean-yield floor is set: `specpilot job`'s key, else generate's flag."""
    return "[job] min_clean_yield" if job else "--min-clean-yield"


DEFAULT_MIN_CLEAN_YIELD_PCT = 80.0
DEFAULT_GUARD_MIN_ROWS = 200
#: the least --guard-min-rows: below it one row moves the clean share by 2% or more, so the
#: guard would judge on the very first rows
GUARD_LEAST_ROWS = 50
#: the guard judges after at least this share of the input too
GUARD_INPUT_SHARE = 0.02
#: the Wilson bound's z: 99% two-sided
GUARD_Z = 2.576
#: a proposed max_tokens is rounded up to a multiple of this
BUDGET_STEP_TOKENS = 256
#: tokens a chat template adds around a prompt (roles, special tokens) beyond its text
TEMPLATE_TOKENS = 64
PERCENTILES = (50, 90, 99)


def primary_cause(flags: Iterable[str]) -> str | None:
    """The cause a row with these flags counts under; None for a clean row."""
    present = set(flags)
    if not present:
        return None
    for cause in CAUSES:
        if present.intersection(cause.flags):
            return cause.name
    return CAUSES[-1].name


def check_floor(percent: float, field: str) -> float:
    """A clean-yield floor given as a percent: 0 (the guard off) or above 1 up to 100."""
    if not 0 <= percent <= 100:
        raise UserError(
            f"must be a percent from 0 to 100, got {percent:g}",
            field=field,
            fix="give e.g. 80 for 80% of rows clean (0 turns the yield guard off)",
        )
    if 0 < percent <= 1:
        raise UserError(
            f"{percent:g} reads as a fraction, but the floor is a percent",
            field=field,
            fix=f"write {percent * 100:g} for {percent:.0%} (0 turns the yield guard off)",
        )
    return float(percent)


def check_min_rows(rows: int, field: str) -> int:
    if rows < GUARD_LEAST_ROWS:
        raise UserError(
            f"{rows} rows are too few to judge a job's yield (the guard would stop it on its first rows)",
            field=field,
            fix=f"give at least {GUARD_LEAST_ROWS} (default {DEFAULT_GUARD_MIN_ROWS})",
        )
    return rows


@dataclass(frozen=True)
class YieldFloor:
    """The clean share a job must keep, and how many rows the guard waits for before judging."""

    min_clean_pct: float = DEFAULT_MIN_CLEAN_YIELD_PCT
    min_rows: int = DEFAULT_GUARD_MIN_ROWS

    @property
    def on(self) -> bool:
        return self.min_clean_pct > 0

    def rows_to_judge(self, input_rows: int) -> int:
        return max(self.min_rows, math.ceil(GUARD_INPUT_SHARE * input_rows))

    def to_json(self) -> dict[str, Any]:
        return {"min_clean_yield_pct": self.min_clean_pct, "guard_min_rows": self.min_rows}


def wilson_upper(successes: int, n: int, z: float = GUARD_Z) -> float:
    """The Wilson score interval's upper bound of a share `successes / n` (1 for n = 0)."""
    if n <= 0:
        return 1.0
    p = successes / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return min(1.0, (centre + margin) / (1 + z2 / n))


def percentile(values: Sequence[int], percent: int) -> int:
    """Nearest-rank percentile of `values` (0 for none)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(len(ordered) * percent / 100) - 1))]


@dataclass(frozen=True)
class Budget:
    """A max_tokens from measured answer lengths: their percentiles, how many were cut at the
    max_tokens they were asked with, the room the context leaves, and the proposal."""

    answers: int
    p50: int
    p90: int
    p99: int
    cut: int
    max_tokens: int | None
    #: context tokens minus the longest prompt; None where the context is not known
    room_tokens: int | None
    context_tokens: int | None
    longest_prompt_tokens: int
    #: the max_tokens that covers p99 within the room; None where no larger one fits or is known
    proposed: int | None

    @property
    def censored(self) -> bool:
        """More than 1% were cut: p99 is only known to be at least max_tokens."""
        return self.max_tokens is not None and self.p99 >= self.max_tokens and self.cut > 0

    @property
    def cut_share(self) -> float:
        return self.cut / self.answers if self.answers else 0.0

    def lengths_text(self) -> str:
        text = (
            f"completion tokens of {self.answers:,} answers: p50 {self.p50:,}, p90 {self.p90:,}, "
            f"p99 {self.p99:,}"
        )
        if self.max_tokens is None:
            return text
        text += f"; {self.cut:,} ({self.cut_share:.1%}) cut at max_tokens {self.max_tokens:,}"
        if self.censored:
            text += (
                " (a cut answer is only known to be at least that long: the true p99 is at least "
                f"{self.max_tokens:,})"
            )
        return text

    def room_text(self) -> str:
        if self.room_tokens is None:
            return "the context is not known (the server did not say; give [job] a server spec that sets it)"
        return (
            f"the context of {self.context_tokens:,} tokens leaves {self.room_tokens:,} after the longest "
            f"prompt ({self.longest_prompt_tokens:,} tokens)"
        )

    def covers_text(self) -> str:
        """What the proposal covers: p99 within the context, or (censored) as much as it allows."""
        if not self.censored:
            return "covers p99 within the context"
        if self.room_tokens is None:
            return "is a step up (p99 lies beyond the cut, and the context is not known)"
        return "is the most the context allows (p99 lies beyond the cut)"

    def to_json(self) -> dict[str, Any]:
        return {
            "answers": self.answers, "p50": self.p50, "p90": self.p90, "p99": self.p99, "cut": self.cut,
            "cut_share": round(self.cut_share, 4), "censored": self.censored, "max_tokens": self.max_tokens,
            "context_tokens": self.context_tokens, "longest_prompt_tokens": self.longest_prompt_tokens,
            "room": self.room_tokens, "proposed": self.proposed,
        }  # fmt: skip


def _round_up(tokens: int) -> int:
    return -(-tokens // BUDGET_STEP_TOKENS) * BUDGET_STEP_TOKENS


def propose_budget(
    lengths: Sequence[int],
    max_tokens: int | None,
    context_tokens: int | None,
    longest_prompt_tokens: int,
) -> Budget:
    """The max_tokens that covers the lengths' p99 within the context (see the module docstring).

    Uncensored: p99 rounded up to BUDGET_STEP_TOKENS, at most the room. Censored: the room
    (the most the context allows; p99 lies beyond max_tokens), or none where the room is not
    larger than max_tokens; without a known context, twice max_tokens (a step, not a bound)."""
    p50, p90, p99 = (percentile(lengths, p) for p in PERCENTILES)
    cut = sum(1 for n in lengths if max_tokens is not None and n >= max_tokens)
    room = None if context_tokens is None else max(0, context_tokens - longest_prompt_tokens)
    budget = Budget(
        len(lengths), p50, p90, p99, cut, max_tokens, room, context_tokens, longest_prompt_tokens, None
    )
    return replace(budget, proposed=_proposed(budget.censored, p99, max_tokens, room))


def _proposed(censored: bool, p99: int, max_tokens: int | None, room: int | None) -> int | None:
    """The budget `propose_budget` proposes (see there); None where no larger one fits."""
    if not censored:
        wanted = _round_up(max(p99, 1))
        return wanted if room is None else min(wanted, room)
    assert max_tokens is not None
    if room is None:
        return 2 * max_tokens
    return room if room > max_tokens else None


@dataclass
class YieldCount:
    """Rows judged: how many, how many clean, the rest by cause."""

    judged: int = 0
    clean: int = 0
    by_cause: Counter[str] = field(default_factory=Counter)

    def add(self, flags: Iterable[str]) -> None:
        self.judged += 1
        cause = primary_cause(flags)
        if cause is None:
            self.clean += 1
        else:
            self.by_cause[cause] += 1

    @property
    def share(self) -> float:
        return self.clean / self.judged if self.judged else 1.0

    def upper(self) -> float:
        return wilson_upper(self.clean, self.judged)

    def main_cause(self) -> str | None:
        found = [(count, -CAUSE_NAMES.index(name), name) for name, count in self.by_cause.items() if count]
        return max(found)[2] if found else None

    def causes_text(self) -> str:
        return ", ".join(f"{self.by_cause[c.name]:,} {c.says}" for c in CAUSES if self.by_cause[c.name])

    def to_json(self) -> dict[str, Any]:
        return {
            "judged": self.judged,
            "clean": self.clean,
            "clean_share": round(self.share, 4),
            "by_cause": {name: self.by_cause[name] for name in CAUSE_NAMES},
        }


def fix_for(cause: str, budget: Budget | None, *, job: bool) -> str:
    """What to do about `cause` (for truncation, with the answers' lengths in `budget`)."""
    again = "`specpilot job` again" if job else "the same command again"
    if cause == "truncated" and budget is not None:
        said = f"answer lengths so far: {budget.lengths_text()}; {budget.room_text()}"
        if budget.max_tokens is None:
            return (
                f"{said}; no max_tokens was given, so the answers ran to the server's own limit: "
                "a longer context (the server's --context-length / --max-model-len) is the fix"
            )
        if budget.proposed is None:
            return (
                f"{said}; no larger max_tokens fits that context: start the server with a longer context, "
                "then run again with a larger --max-tokens and --retry-truncated"
            )
        return (
            f"{said}; max_tokens {budget.proposed:,} {budget.covers_text()}: run {again} with "
            f"--max-tokens {budget.proposed} --retry-truncated (the cut rows are sent again, each once)"
        )
    fix = cause_named(cause).fix or CAUSES[-1].fix
    assert fix is not None  # other_flags' fix is a text
    return fix.format(again=again)


class YieldGuard:
    """Sees every row a run finishes; says once when the run should stop (module docstring)."""

    def __init__(self, floor: YieldFloor, input_rows: int, max_tokens: int | None) -> None:
        self.floor = floor
        self.to_judge = floor.rows_to_judge(input_rows)
        self.max_tokens = max_tokens
        self.count = YieldCount()
        self.lengths: list[int] = []  # completion tokens of every answer (turn)
        self.longest_prompt_tokens = 0
        self.fired = False

    def observe(self, meta: Mapping[str, Any]) -> bool:
        """Count a finished row; True once, when the run should stop."""
        self.count.add(meta.get("flags") or ())
        for turn in meta.get("turns") or (meta,):
            self.lengths.append(int(turn.get("completion_tokens") or 0))
            self.longest_prompt_tokens = max(self.longest_prompt_tokens, int(turn.get("prompt_tokens") or 0))
        if self.fired or not self.floor.on or self.count.judged < self.to_judge:
            return False
        if self.count.upper() * 100 >= self.floor.min_clean_pct:
            return False
        self.fired = True
        return True

    def budget(self, context_tokens: int | None) -> Budget:
        prompt = self.longest_prompt_tokens + TEMPLATE_TOKENS if self.longest_prompt_tokens else 0
        return propose_budget(self.lengths, self.max_tokens, context_tokens, prompt)

    def stop_message(self, context_tokens: int | None, *, job: bool) -> str:
        count = self.count
        cause = count.main_cause() or CAUSES[-1].name
        says = cause_named(cause).says
        return (
            f"yield guard: after {count.judged:,} finished rows only {count.clean:,} are clean "
            f"({count.share:.1%}; at most {count.upper():.1%} at 99% confidence), under the floor of "
            f"{self.floor.min_clean_pct:g}% ({floor_setting(job)}); "
            f"not clean: {count.causes_text()}. Most rows are {says}: "
            f"{fix_for(cause, self.budget(context_tokens), job=job)}. No new rows were sent; the rows in "
            "flight were committed, and every row done stays done"
        )

    def to_json(self, context_tokens: int | None) -> dict[str, Any]:
        return {
            **self.count.to_json(),
            "to_judge": self.to_judge,
            "upper_bound": round(self.count.upper(), 4),
            **self.floor.to_json(),
            "main_cause": self.count.main_cause(),
            "lengths": self.budget(context_tokens).to_json(),
        }
