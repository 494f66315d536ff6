"""The search: which point of the axes finishes the whole job first, within one budget.

A point is a configuration (speculation off, a method at k draft tokens, with the engine's
adaptive speculation where the release has it; where the plan puts one near its release's
prefill-graph gate, the same on the gate's other side) at a running-request cap: the plan's
maximum for that configuration and two lower points (`cap_points`). Running every point with the
full sample would cost (points) x (start + sample); the search spends far less:

1. **Plan prunes.** Every point is checked and planned first; one that check refuses or that
   does not fit is never started and stays in the table with the reason. A configuration
   whose plan names the gate's other side (`Planned.other_side`) adds that configuration.
2. **Screen.** Each configuration is started once, at its largest cap, with one batch of the
   sample (`cap` rows). The run fills the cap and drains: the drain passes through every
   smaller batch size, so one short run gives the configuration's output rate at each number
   of requests in flight (`projection.BatchRates`), and from it the projected job time of the
   configuration at each of its caps.
3. **Confirm, best first.** The point projected to finish first is measured with the full
   sample at its own cap; then the next, while one not yet confirmed is projected within
   `MARGIN` of the best confirmed (at most `CONFIRM_MAX`). The winner is the confirmed point
   whose own full measurement projects the shortest job.

Every projection is the whole job played out with its waves and tail (`projection.project_job`,
the model `plan --job`, `generate` and `report` use too). A point
that fails to start, or answers too little to measure, is dropped and kept with the reason;
a point the budget cannot reach is kept as "not started". Costs are what the measurer
reports (wall seconds for a real engine), so a test can count them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specpilot.bench.variants import Variant
from specpilot.projection import BatchRates, JobTime, project_job

#: a point not yet confirmed is measured while projected within this share of the best one
MARGIN = 0.03
#: full-sample measurements at most (the screen's ranking is trusted beyond them)
CONFIRM_MAX = 3
#: share of the budget the screens may spend, split among the configurations
SCREEN_SHARE = 0.5
#: the confirmations planned for when a budget share is given to each
CONFIRM_PLANNED = 2


def cap_points(most: int) -> tuple[int, ...]:
    """The plan's maximum and two lower caps: half and a quarter of it, largest first."""
    return tuple(sorted({most, max(1, math.ceil(most / 2)), max(1, math.ceil(most / 4))}, reverse=True))


@dataclass(frozen=True)
class Planned:
    """What plan says of a point: the most requests it runs at once, or why it cannot run."""

    max_running_requests: int | None
    refused: str | None = None
    #: the same configuration on the other side of the release's prefill-graph gate, where
    #: the plan says the gate is near
    other_side: Variant | None = None


@dataclass(frozen=True)
class Trial:
    """One measurement of a point with `rows` rows."""

    ok: bool
    reason: str | None
    rates: BatchRates
    #: output tokens of every answered request
    lengths: tuple[int, ...]
    #: seconds the measurement cost (start, warm-up, sample)
    cost_s: float
    #: the measurer's own row for the table (bench.measure.Measured for a real engine)
    row: Any = None


class Measurer(Protocol):
    def plan(self, point: Variant) -> Planned: ...

    async def measure(self, point: Variant, rows: int, budget_s: float) -> Trial: ...


@dataclass
class Entry:
    """One point's line of the search table."""

    point: Variant
    #: refused | not started | failed | screened | predicted | measured
    status: str
    reason: str | None = None
    max_running_requests: int | None = None
    #: the latest trial of this point
    trial: Trial | None = None
    job: JobTime | None = None
    #: the projection from its configuration's screen (the search's ranking)
    predicted: JobTime | None = None
    #: what `job` rests on
    basis: str | None = None

    @property
    def label(self) -> str:
        return self.point.label


@dataclass
class SearchResult:
    entries: list[Entry]
    winner: Entry | None
    spent_s: float
    trials: int
    #: output lengths every projection used
    lengths: tuple[int, ...]
    notes: list[str] = field(default_factory=list)

    @property
    def started(self) -> bool:
        """Whether any point was started (else nothing could be measured)."""
        return self.trials > 0


@dataclass(frozen=True)
class Job:
    """The job the search projects: its rows, and how many servers of how many GPUs run it."""

    input_rows: int
    servers: int = 1
    gpus_per_server: int = 1


async def search(
    configs: Sequence[Variant],
    measurer: Measurer,
    job: Job,
    *,
    full_rows: int,
    budget_s: float,
    least_s: float = 0.0,
) -> SearchResult:
    """Plan every point, screen each configuration, confirm best first (the module's rules).
    `least_s`: below this budget share a point is not started."""
    state = _State(measurer, job, budget_s, least_s)
    screens: list[Entry] = []
    pending = list(configs)
    for config in pending:  # a gate's other side joins the list as it is found
        planned = measurer.plan(config)
        if planned.other_side is not None and planned.other_side not in pending:
            pending.append(planned.other_side)
        if planned.refused is not None or planned.max_running_requests is None:
            state.entries.append(Entry(config, "refused", planned.refused or "no plan"))
            continue
        caps = cap_points(planned.max_running_requests)
        for cap in caps:
            at = measurer.plan(config.at(cap))
            entry = Entry(config.at(cap), "predicted", at.refused, at.max_running_requests or cap)
            entry.status = "refused" if at.refused is not None else "predicted"
            state.entries.append(entry)
            if cap == caps[0] and at.refused is None:
                screens.append(entry)
                state.screens[config] = entry
    share_s = budget_s * SCREEN_SHARE / max(1, len(screens))
    for entry in screens:
        rows = min(entry.max_running_requests or 1, full_rows)
        # a screen of the whole sample is that point's full measurement
        await state.run(entry, rows, share_s, "measured" if rows == full_rows else "screened")
    state.predict()
    await state.confirm(full_rows)
    return state.result()


@dataclass
class _State:
    measurer: Measurer
    job: Job
    budget_s: float
    least_s: float
    entries: list[Entry] = field(default_factory=list)
    #: configuration -> the entry of its screen (its largest cap)
    screens: dict[Variant, Entry] = field(default_factory=dict)
    spent_s: float = 0.0
    trials: int = 0

    @property
    def left_s(self) -> float:
        return self.budget_s - self.spent_s

    def lengths(self) -> tuple[int, ...]:
        return tuple(n for e in self.entries if e.trial is not None and e.trial.ok for n in e.trial.lengths)

    async def run(self, entry: Entry, rows: int, share_s: float, status: str) -> None:
        share_s = min(share_s, self.left_s)
        if share_s < self.least_s or share_s <= 0:
            if entry.trial is None:
                entry.status, entry.reason = (
                    "not started",
                    f"the budget leaves {max(share_s, 0):.0f} s for it",
                )
            return
        trial = await self.measurer.measure(entry.point, rows, share_s)
        self.spent_s += trial.cost_s
        self.trials += 1
        if not trial.ok or not trial.rates.points:
            entry.trial = entry.trial if entry.trial is not None and entry.trial.ok else trial
            entry.status, entry.reason = "failed", trial.reason or "nothing measured"
            return
        entry.trial, entry.status, entry.reason = trial, status, None

    def predict(self) -> None:
        """Each configuration's caps projected from its screen's rates; a point whose
        configuration was not screened is not started."""
        for entry in self.entries:
            source = self.screens.get(entry.point.config)
            if entry.status not in ("predicted", "screened"):
                continue
            if source is None or source.status != "screened" or source.trial is None:
                entry.status, entry.reason = "not started", _unscreened(entry, source)
        self.reproject()

    def projection_lengths(self) -> tuple[int, ...]:
        """The output lengths every projection plays: the full sample's once one was measured
        (else the screens'), so that no two points are compared on different rows."""
        full = [e.trial.lengths for e in self.entries if e.status == "measured" and e.trial is not None]
        return full[0] if full else self.lengths()

    def reproject(self) -> None:
        """Every projection again on the same output lengths (`projection_lengths`)."""
        lengths = self.projection_lengths()
        if not lengths:
            return
        for entry in self.entries:
            source = self.screens.get(entry.point.config)
            cap = entry.point.running_cap or 1
            if (
                source is not None
                and source.trial is not None
                and source.trial.ok
                and entry.status != "failed"
            ):
                entry.predicted = self._project(source.trial.rates.capped(cap), cap, lengths)
                kind = "sample" if source.status == "measured" else "screen"
                entry.basis = f"{source.label}'s {kind} ({len(source.trial.lengths)} rows)"
                entry.job = entry.predicted
            if entry.status == "measured" and entry.trial is not None:
                entry.job = self._project(entry.trial.rates, cap, lengths)
                entry.basis = f"its own {len(entry.trial.lengths)} rows"

    async def confirm(self, full_rows: int) -> None:
        """Best predicted first; go on while a waiting point is predicted within MARGIN of the
        best confirmed point's prediction, or below what that point measured."""
        while True:
            best = self._best_confirmed()
            waiting = sorted(
                (
                    e
                    for e in self.entries
                    if e.status in ("predicted", "screened") and e.predicted is not None
                ),
                key=_predicted,
            )
            confirmed = sum(e.status == "measured" for e in self.entries)
            if not waiting or confirmed >= CONFIRM_MAX:
                return
            nxt = waiting[0]
            if best is not None and _predicted(nxt) >= max(_predicted(best) * (1 + MARGIN), _wall(best)):
                return
            before = self.trials
            # the last planned confirmation may spend all that is left
            await self.run(nxt, full_rows, self.left_s / max(1, CONFIRM_PLANNED - confirmed), "measured")
            if self.trials == before:  # the budget is spent
                return
            if nxt.status != "measured":
                nxt.job = nxt.predicted = None
            self.reproject()

    def _best_confirmed(self) -> Entry | None:
        done = [e for e in self.entries if e.status == "measured" and e.job is not None]
        return min(done, key=_wall, default=None)

    def _project(self, rates: BatchRates, cap: int, lengths: Sequence[int]) -> JobTime | None:
        """The job at `cap` on these rates; None when they give no finite time (no rate seen)."""
        job = project_job(
            lengths,
            self.job.input_rows,
            cap,
            rates.rate_at,
            servers=self.job.servers,
            gpus_per_server=self.job.gpus_per_server,
        )
        return job if math.isfinite(job.wall_s) else None

    def result(self) -> SearchResult:
        winner = self._best_confirmed()
        notes = []
        if winner is not None:
            # what the confirmations left: points projected to finish sooner on a screen alone
            for entry in self.entries:
                if entry.status in ("predicted", "screened") and _wall(entry) < _wall(winner):
                    notes.append(
                        f"{entry.label} projects {entry.job.wall_s if entry.job else 0:,.0f} s on "
                        f"{entry.basis} alone, below the winner's {_wall(winner):,.0f} s; not confirmed "
                        f"(at most {CONFIRM_MAX} confirmations, or the budget)"
                    )
        if winner is None:
            # no full measurement: the best screen stands, and says so
            screened = [e for e in self.entries if e.status == "screened" and e.job is not None]
            winner = min(screened, key=_wall, default=None)
            if winner is not None:
                notes.append(f"{winner.label} wins on its screen alone: the budget confirmed no point")
        return SearchResult(self.entries, winner, self.spent_s, self.trials, self.projection_lengths(), notes)


def _wall(entry: Entry) -> float:
    return entry.job.wall_s if entry.job is not None else math.inf


def _predicted(entry: Entry) -> float:
    return entry.predicted.wall_s if entry.predicted is not None else math.inf


def _unscreened(entry: Entry, source: Entry | None) -> str:
    if source is None:
        return f"its configuration ({entry.point.config.label}) was not screened"
    return f"its configuration's screen ({source.label}) {source.status}: {source.reason}"
