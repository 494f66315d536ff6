"""The budget a bench expects to need, said before anything starts, and the least that
measures two configurations (below it the bench refuses to start: nothing could be compared).

A measurement costs a start, a warm-up and its rows. A start of this engine and release on
this host costs what the host's runs recorded (`RunState.ready_s`, their median), else the
engine's stated estimate (`engines.starts`: the first start on a machine compiles kernels);
never more than the spec's ready timeout, after which a start fails. Rows cost their waves
(rows / cap) of answers `--max-tokens` long at `ASSUMED_TOKENS_PER_S_PER_REQUEST`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from specpilot.bench.measure import WARMUP_MAX_TOKENS
from specpilot.bench.search import CONFIRM_MAX
from specpilot.bench.variants import release_name
from specpilot.engines.adapter import EngineRelease
from specpilot.errors import UserError
from specpilot.launch.state import STATE_FILE, DamagedState, load_state_file, specpilot_home
from specpilot.spec import Spec

#: the output rate of one running request assumed before anything is measured (a 20-30B
#: model's decode at its cap on one GPU)
ASSUMED_TOKENS_PER_S_PER_REQUEST = 20.0
#: an answer's length assumed where --max-tokens does not bound it
ASSUMED_ANSWER_TOKENS = 1024


@dataclass(frozen=True)
class StartCosts:
    """Seconds a start is expected to take: the first of the bench's, and each later one."""

    first_s: float
    later_s: float
    basis: str

    def nth_s(self, index: int) -> float:
        return self.first_s if index == 0 else self.later_s


def recorded_starts(spec: Spec) -> list[float]:
    """Start-to-ready seconds of this engine and release recorded by this host's runs."""
    found = []
    for path in (specpilot_home() / "runs").glob(f"*/{STATE_FILE}"):
        try:
            state = load_state_file(path)
        except (OSError, DamagedState):
            continue
        if (
            state.ready_s is not None
            and state.engine == spec.engine.name
            and state.engine_version == spec.engine.version
            and state.host.target == spec.host.target
        ):
            found.append(state.ready_s)
    return found


def start_costs(spec: Spec, release: EngineRelease) -> StartCosts:
    """The recorded starts' median, else the engine's stated estimate; at most the ready timeout."""
    timeout_s = spec.server.ready_timeout_s
    named = release_name(release)
    recorded = recorded_starts(spec)
    if recorded:
        typical_s = min(statistics.median(recorded), timeout_s)
        return StartCosts(
            typical_s,
            typical_s,
            f"the median of {len(recorded)} start{'s' if len(recorded) != 1 else ''} of {named} "
            f"recorded on {spec.host.target}",
        )
    estimate = release.engine.start
    return StartCosts(
        min(estimate.first_s, timeout_s),
        min(estimate.later_s, timeout_s),
        f"no start of {named} recorded on {spec.host.target}: the first start on a machine compiles "
        f"kernels ({estimate.basis}); at most [server] ready_timeout_s {timeout_s:g} s",
    )


@dataclass(frozen=True)
class BudgetNeed:
    """What the search expects to spend, and the least that measures two configurations."""

    #: every configuration screened and `CONFIRM_MAX` points confirmed
    expected_s: float
    #: the first two screens (one where a single configuration is searched)
    least_s: float
    #: the least and the expected per configuration measured, as the line says it
    line: str

    def check(self, budget_s: float, configs: int) -> None:
        """One line naming the budget that can, when this one cannot measure two configurations."""
        if budget_s >= self.least_s:
            return
        what = "two configurations" if configs > 1 else "its one configuration"
        raise UserError(
            f"{budget_s:g} s cannot measure {what}: they need about {math.ceil(self.least_s)} s "
            f"({self.line})",
            field="--budget-s",
            fix=f"pass --budget-s {math.ceil(self.least_s)} or more (about {math.ceil(self.expected_s)} s to "
            "search every point), or --variants with fewer configurations",
        )


@dataclass(frozen=True)
class Costs:
    """What one measurement is expected to cost before anything is measured."""

    starts: StartCosts
    warmup_s: float
    #: the answers' most output tokens (None: not bounded by --max-tokens)
    max_tokens: int | None

    @property
    def answer_tokens(self) -> int:
        return self.max_tokens or ASSUMED_ANSWER_TOKENS

    def sample_s(self, rows: int, cap: int) -> float:
        """`rows` answered `cap` at a time."""
        return math.ceil(rows / max(1, cap)) * self.answer_tokens / ASSUMED_TOKENS_PER_S_PER_REQUEST

    @property
    def expected_warmup_s(self) -> float:
        """The warm-up's one batch of short answers, at most --warmup-s."""
        return min(
            self.warmup_s, min(self.answer_tokens, WARMUP_MAX_TOKENS) / ASSUMED_TOKENS_PER_S_PER_REQUEST
        )

    def measurement_s(self, index: int, rows: int, cap: int) -> float:
        """The `index`th start of the bench, its warm-up and `rows` at `cap`."""
        return self.starts.nth_s(index) + self.expected_warmup_s + self.sample_s(rows, cap)

    def need(self, screen_caps: list[int], full_rows: int) -> BudgetNeed:
        """The screens (one batch at each configuration's largest cap, in the search's order) and
        `CONFIRM_MAX` full samples at half the largest cap."""
        screens = [self.measurement_s(i, min(cap, full_rows), cap) for i, cap in enumerate(screen_caps)]
        half = max(1, math.ceil(max(screen_caps, default=1) / 2))
        confirms = [self.measurement_s(len(screens) + i, full_rows, half) for i in range(CONFIRM_MAX)]
        least_s = sum(screens[:2])
        tokens = (
            f"{self.max_tokens} (--max-tokens)"
            if self.max_tokens
            else f"{ASSUMED_ANSWER_TOKENS} (no --max-tokens)"
        )
        line = (
            f"a start ~{self.starts.first_s:.0f} s first, ~{self.starts.later_s:.0f} s later "
            f"({self.starts.basis}); "
            f"warm-up ~{self.expected_warmup_s:.0f} s; answers of {tokens} tokens at "
            f"~{ASSUMED_TOKENS_PER_S_PER_REQUEST:g} tok/s a request"
        )
        return BudgetNeed(sum(screens) + sum(confirms), least_s, line)
