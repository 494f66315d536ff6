"""The search: which point of the axes finishes the whole job first, within one budget.

A point is a configuration (speculation off, a method at k draft tokens, with the engine's
adaptive speculation where the release has it; where the plan puts one near its release's
prefill-graph gate, the same on the gate's other side) at a running-request cap: the plan's
maximum for that configuration, half and a quarter of it (`cap_points`), and the KV-bound cap
once a screen has shown the sample's lengths. Running every point with the full sample would
cost (points) x (start + sample); the search spends far less, in the order that decides the
winner soonest:

1. **Plan prunes.** Every point is checked and planned first; one that check refuses or that
   does not fit is never started and stays in the table with the reason. A configuration
   whose plan names the gate's other side (`Planned.other_side`) adds that configuration.
2. **Screen every configuration** before confirming any: each is started once, at its largest
   cap, with one batch of the sample (`cap` rows). The run fills the cap and drains: the drain
   passes through every smaller batch size, so one short run gives the configuration's output
   rate at each number of requests in flight (`projection.BatchRates`), and from it the
   projected job time of the configuration at each of its caps. The screen also shows the
   sample's prompt and answer lengths: the cap at which the plan's KV cache holds every running
   request whole (`kv_bound_cap`) joins the configuration's caps; above it the engine preempts
   (vLLM) or retracts (SGLang) requests and computes them again.
3. **Confirm, best first.** The point projected to finish first is measured with the full
   sample at its own cap; then the best point of another configuration (so that two are
   compared on the full sample); then the next, while one not yet confirmed is projected within
   `MARGIN` of the best confirmed (at most `CONFIRM_MAX`).
4. **Find the knee.** A configuration whose throughput still rises as its cap falls (its
   lowest measured cap beats the one above it) is measured at half that cap, and on while it
   keeps rising (at most `KNEE_PROBES_MAX`), within the budget.

The winner is the point measured at its own cap (screened or confirmed, confirmed first) whose
projection is the shortest, and only when at least two configurations were measured at their
own points (`SearchResult.compared`), or the caller searched one configuration (`alone`): a
point projected from another point's screen ("predicted") never wins, and without a comparison
there is no winner (`SearchResult.verdict` says what was measured and what was not, and why).

Every projection is the whole job played out with its waves and tail (`projection.project_job`,
the model `plan --job`, `generate` and `report` use too). Each measurement may spend what is
left of the budget (a start gets the spec's ready timeout while the budget holds it); a point
that fails to start, or answers too little to measure, is dropped and kept with the reason;
a point the budget cannot reach is kept as "not started". Costs are what the measurer reports
(wall seconds for a real engine), so a test can count them.
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
#: measurements at most that look for a configuration's knee
KNEE_PROBES_MAX = 6
#: the knee is found once the caps with and without preemptions are this share of a cap apart
KNEE_RESOLUTION = 0.1
#: configurations whose best point is within this share of the best one are probed for their knee
KNEE_NEAR = 0.1


def cap_points(most: int, kv_bound: int | None = None) -> tuple[int, ...]:
    """The plan's maximum and two lower caps (half and a quarter of it), and the KV-bound cap
    where it lies below the maximum; largest first."""
    caps = {most, max(1, math.ceil(most / 2)), max(1, math.ceil(most / 4))}
    if kv_bound is not None and 1 <= kv_bound < most:
        caps.add(kv_bound)
    return tuple(sorted(caps, reverse=True))


def kv_bound_cap(kv_tokens: int, prompt_tokens: Sequence[int], output_tokens: Sequence[int]) -> int | None:
    """The most running requests whose whole length (mean prompt + mean answer) the KV cache of
    `kv_tokens` holds at once; None without lengths."""
    if kv_tokens <= 0 or not output_tokens:
        return None
    prompt = sum(prompt_tokens) / len(prompt_tokens) if prompt_tokens else 0.0
    whole = prompt + sum(output_tokens) / len(output_tokens)
    return max(1, math.floor(kv_tokens / whole)) if whole > 0 else None


@dataclass(frozen=True)
class Planned:
    """What plan says of a point: the most requests it runs at once, or why it cannot run."""

    max_running_requests: int | None
    refused: str | None = None
    #: the same configuration on the other side of the release's prefill-graph gate, where
    #: the plan says the gate is near
    other_side: Variant | None = None
    #: tokens the plan's KV cache holds (the KV-bound cap is read from it)
    kv_tokens: int | None = None


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
    #: prompt tokens of every answered request (empty where the server did not say)
    prompt_tokens: tuple[int, ...] = ()
    #: requests the engine preempted or retracted for KV room during it (None: not known)
    preemptions: int | None = None


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
    #: why the search tried this cap (the plan's maximum, half, a quarter, KV-bound, knee)
    origin: str | None = None

    @property
    def label(self) -> str:
        return self.point.label

    @property
    def own(self) -> bool:
        """Measured at its own cap (a screen or the full sample), with a projected job."""
        return self.status in ("screened", "measured") and self.job is not None


@dataclass
class SearchResult:
    entries: list[Entry]
    winner: Entry | None
    spent_s: float
    trials: int
    #: output lengths every projection used
    lengths: tuple[int, ...]
    notes: list[str] = field(default_factory=list)
    #: the configurations measured at their own points (a winner needs two, or `alone`)
    compared: tuple[str, ...] = ()
    #: why there is no winner: what was measured, what was not and why (None with a winner)
    verdict: str | None = None

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
    """Plan every point, screen each configuration, confirm best first, find the knee (the
    module's rules). `least_s`: with less of the budget left a point is not started (a start
    and warm-up take about that). One configuration given is searched `alone`: its best point
    wins without a comparison, and the result says so."""
    state = _State(measurer, job, budget_s, least_s)
    for entry in state.plan_all(configs):
        rows = min(entry.max_running_requests or 1, full_rows)
        # a screen of the whole sample is that point's full measurement
        await state.run(entry, rows, "measured" if rows == full_rows else "screened")
        state.add_kv_cap(entry)
    state.predict()
    await state.confirm(full_rows)
    await state.probe_knees(full_rows)
    return state.result(alone=len(configs) == 1)


#: why each of `cap_points`' first three caps is searched
CAP_ORIGINS = ("the plan's maximum", "half the maximum", "a quarter of the maximum")


@dataclass
class _State:
    measurer: Measurer
    job: Job
    budget_s: float
    least_s: float
    entries: list[Entry] = field(default_factory=list)
    #: configuration -> the entry of its screen (its largest cap)
    screens: dict[Variant, Entry] = field(default_factory=dict)
    #: configuration -> the tokens its plan's KV cache holds
    kv_tokens: dict[Variant, int | None] = field(default_factory=dict)
    spent_s: float = 0.0
    trials: int = 0

    @property
    def left_s(self) -> float:
        return self.budget_s - self.spent_s

    def lengths(self) -> tuple[int, ...]:
        return tuple(n for e in self.entries if e.trial is not None and e.trial.ok for n in e.trial.lengths)

    def add(self, point: Variant, origin: str) -> Entry:
        """The point planned and in the table (refused where its plan says no)."""
        at = self.measurer.plan(point)
        entry = Entry(
            point, "predicted", at.refused, at.max_running_requests or point.running_cap, origin=origin
        )
        entry.status = "refused" if at.refused is not None else "predicted"
        self.entries.append(entry)
        return entry

    def plan_all(self, configs: Sequence[Variant]) -> list[Entry]:
        """Every configuration planned at its caps, a gate's other side joining the list as it
        is found; the screens (each planned configuration's largest cap), in that order."""
        screens: list[Entry] = []
        pending = list(configs)
        for config in pending:
            planned = self.measurer.plan(config)
            if planned.other_side is not None and planned.other_side not in pending:
                pending.append(planned.other_side)
            screen = self._plan_caps(config, planned)
            if screen is not None:
                screens.append(screen)
        return screens

    def _plan_caps(self, config: Variant, planned: Planned) -> Entry | None:
        """The configuration's caps in the table (or its refusal); its screen where one can run."""
        if planned.refused is not None or planned.max_running_requests is None:
            self.entries.append(Entry(config, "refused", planned.refused or "no plan"))
            return None
        self.kv_tokens[config] = planned.kv_tokens
        caps = cap_points(planned.max_running_requests)
        screen = None
        for cap, origin in zip(caps, CAP_ORIGINS, strict=False):
            entry = self.add(config.at(cap), origin)
            if cap == caps[0] and entry.status == "predicted":
                screen = self.screens[config] = entry
        return screen

    def at_cap(self, config: Variant, cap: int) -> Entry | None:
        return next((e for e in self.entries if e.point == config.at(cap)), None)

    def add_kv_cap(self, screen: Entry) -> None:
        """The cap at which the plan's KV cache holds every running request whole, from the
        screen's prompt and answer lengths, joins its configuration's caps."""
        config, trial = screen.point.config, screen.trial
        kv_tokens = self.kv_tokens.get(config)
        if trial is None or not trial.ok or not kv_tokens:
            return
        cap = kv_bound_cap(kv_tokens, trial.prompt_tokens, trial.lengths)
        if cap is None or cap >= (screen.point.running_cap or 0) or self.at_cap(config, cap) is not None:
            return
        self.add(
            config.at(cap),
            f"KV-bound: {kv_tokens:,} KV tokens hold {cap} requests of the sample's mean length",
        )

    async def run(self, entry: Entry, rows: int, status: str) -> None:
        """Measure the point with what is left of the budget (its start may take the spec's
        ready timeout while the budget holds it)."""
        left_s = self.left_s
        if left_s < self.least_s or left_s <= 0:
            if entry.trial is None:
                entry.status, entry.reason = "not started", self._unaffordable(left_s)
            return
        trial = await self.measurer.measure(entry.point, rows, left_s)
        self.spent_s += trial.cost_s
        self.trials += 1
        _record(entry, trial, status)

    def _unaffordable(self, left_s: float) -> str:
        """Why a point the budget cannot reach is not started."""
        start = f"; a start and warm-up take about {self.least_s:.0f} s" if self.least_s > 0 else ""
        return f"the budget leaves {max(left_s, 0):.0f} s for it{start}"

    def predict(self) -> None:
        """Each configuration's caps projected from its screen's rates; a point whose
        configuration was not screened is not started."""
        for entry in self.entries:
            source = self.screens.get(entry.point.config)
            if entry.status not in ("predicted", "screened"):
                continue
            if source is None or source.status not in ("screened", "measured") or source.trial is None:
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
            self._reproject(entry, lengths)

    def _reproject(self, entry: Entry, lengths: Sequence[int]) -> None:
        """The point projected from its configuration's screen, and from its own full sample."""
        source = self.screens.get(entry.point.config)
        cap = entry.point.running_cap or 1
        if source is not None and source.trial is not None and source.trial.ok and entry.status != "failed":
            entry.predicted = self._project(source.trial.rates.capped(cap), cap, lengths)
            kind = "sample" if source.status == "measured" else "screen"
            entry.basis = f"{source.label}'s {kind} ({len(source.trial.lengths)} rows)"
            entry.job = entry.predicted
        if entry.status == "measured" and entry.trial is not None:
            entry.job = self._project(entry.trial.rates, cap, lengths)
            entry.basis = f"its own {len(entry.trial.lengths)} rows"

    async def confirm(self, full_rows: int) -> None:
        """Best predicted first, then the best of another configuration while only one has a
        full measurement; go on while a waiting point is predicted within MARGIN of the best
        confirmed point's prediction, or below what that point measured."""
        while (nxt := self._next_to_confirm()) is not None:
            if not await self._measure(nxt, full_rows):
                return

    def _next_to_confirm(self) -> Entry | None:
        """The point `confirm` measures next; None once it is done."""
        waiting = self._waiting()
        measured = [e for e in self.entries if e.status == "measured"]
        if not waiting or len(measured) >= CONFIRM_MAX:
            return None
        other = _of_another_configuration(waiting, measured)
        if other is not None:
            return other  # the winner is compared on the full sample with another configuration
        return None if self._settled(waiting[0]) else waiting[0]

    def _settled(self, soonest: Entry) -> bool:
        """Whether the soonest waiting point is projected past MARGIN of the best confirmed
        point's projection, and not below what that point measured."""
        best = self._best_confirmed()
        return best is not None and _predicted(soonest) >= max(_predicted(best) * (1 + MARGIN), _wall(best))

    def _waiting(self) -> list[Entry]:
        """The points projected from a screen and not yet confirmed, the soonest first."""
        return sorted(
            (
                e
                for e in self.entries
                if e.status in ("predicted", "screened") and e.predicted is not None and e.reason is None
            ),
            key=_predicted,
        )

    async def probe_knees(self, full_rows: int) -> None:
        """Each configuration near the best (within KNEE_NEAR) is measured at the cap
        `_knee_probe` names, on until it names none (at most KNEE_PROBES_MAX), within the budget."""
        for config in self._near_best():
            await self._probe_knee(config, full_rows)

    def _near_best(self) -> list[Variant]:
        """The configurations whose best own point is within KNEE_NEAR of the best, best first."""
        best_s = min((_wall(e) for e in self.entries if e.own), default=math.inf)
        return sorted(
            {e.point.config for e in self.entries if e.own and _wall(e) <= best_s * (1 + KNEE_NEAR)},
            key=lambda c: min(_wall(e) for e in self.entries if e.own and e.point.config == c),
        )

    async def _probe_knee(self, config: Variant, full_rows: int) -> None:
        """The configuration measured at each cap `_knee_probe` names, while it names one."""
        for _ in range(KNEE_PROBES_MAX):
            probe = self._knee_probe(config)
            if probe is None:
                return
            cap, why = probe
            entry = self.at_cap(config, cap)
            if entry is None:
                entry = self.add(config.at(cap), why)
                self.reproject()
            if entry.status not in ("predicted", "screened"):
                return
            entry.origin = why
            if not await self._measure(entry, full_rows) or entry.status != "measured":
                return

    def _knee_probe(self, config: Variant) -> tuple[int, str] | None:
        """The next cap to measure for the configuration's knee, and why; None when found.

        Where the engine preempted (retracted) requests at a measured cap, the knee lies below
        it: the KV-bound cap, else half of it, and then the middle between the highest cap
        measured without preemptions and the lowest with them, until they are KNEE_RESOLUTION
        apart. Where no point says, the throughput does: a lowest measured cap that beats the
        one above it is halved (unless the screen projects that half clearly slower and did not
        underrate the cap measured)."""
        own = sorted(
            (e for e in self.entries if e.own and e.trial is not None and e.point.config == config),
            key=lambda e: e.point.running_cap or 0,
        )
        crowded = [e for e in own if (_preemptions(e) or 0) > 0]
        if crowded:
            return self._below_preempted(config, own, crowded[0])
        return self._below_rising(config, own)

    def _below_preempted(self, config: Variant, own: list[Entry], high: Entry) -> tuple[int, str] | None:
        """The knee below `high`, the lowest cap measured that preempted: the middle between it
        and the highest cap below it measured without, until they are KNEE_RESOLUTION apart."""
        high_cap = high.point.running_cap or 1
        clear = [e for e in own if _preemptions(e) == 0 and (e.point.running_cap or 0) < high_cap]
        word = f"{high.label} preempted {_preemptions(high) or 0} requests"
        if not clear:
            return self._first_below_preempted(config, high, word)
        low_cap = clear[-1].point.running_cap or 1
        if high_cap - low_cap <= max(1, math.floor(KNEE_RESOLUTION * high_cap)):
            return None
        return (low_cap + high_cap) // 2, f"between {clear[-1].label} (none preempted) and {word}"

    def _first_below_preempted(self, config: Variant, high: Entry, word: str) -> tuple[int, str] | None:
        """Below a cap that preempted, with none measured clear below it: the KV-bound cap, else half."""
        high_cap = high.point.running_cap or 1
        kv = next(
            (e for e in self.entries if e.point.config == config and _kv_bound_below(e, high_cap)), None
        )
        if kv is not None:
            return kv.point.running_cap or 1, f"{kv.origin}; {word}"
        cap = math.ceil(high_cap / 2)
        return (cap, f"half of {high.label}: {word}") if cap < high_cap else None

    def _below_rising(self, config: Variant, own: list[Entry]) -> tuple[int, str] | None:
        """Half the lowest cap measured where it beats the one above it, unless the screen
        projects that half clearly slower and did not underrate the cap measured."""
        if len(own) < 2 or _wall(own[0]) >= _wall(own[1]):
            return None
        lowest = own[0]
        cap = math.ceil((lowest.point.running_cap or 1) / 2)
        if cap >= (lowest.point.running_cap or 1):
            return None
        entry = self.at_cap(config, cap)
        underrated = _predicted(lowest) > _wall(lowest) * (1 + MARGIN)
        if not underrated and entry is not None and _predicted(entry) > _wall(lowest) * (1 + MARGIN):
            return None
        return (
            cap,
            f"half of {lowest.label}: its throughput still rose as the cap fell ({own[1].label} above)",
        )

    async def _measure(self, entry: Entry, full_rows: int) -> bool:
        """The point with the full sample, every projection again; False once the budget is spent."""
        before = self.trials
        await self.run(entry, full_rows, "measured")
        if self.trials == before:
            return False
        if entry.status == "failed":
            entry.job = entry.predicted = None
        self.reproject()
        return True

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

    def result(self, *, alone: bool) -> SearchResult:
        compared = tuple(dict.fromkeys(e.point.config.label for e in self.entries if e.own))
        winner, notes = self._winner()
        verdict = None
        if winner is not None and alone:
            notes.append(f"one configuration searched ({winner.point.config.label}): nothing was compared")
        elif len(compared) < 2:
            verdict = self._verdict(compared)
            winner = None
        return SearchResult(
            self.entries,
            winner,
            self.spent_s,
            self.trials,
            self.projection_lengths(),
            notes,
            compared,
            verdict,
        )

    def _winner(self) -> tuple[Entry | None, list[str]]:
        """The best confirmed point, with what the confirmations left; without one, the best
        screen, saying so."""
        winner = self._best_confirmed()
        if winner is not None:
            return winner, self._unconfirmed(winner)
        # no full measurement: the best screen stands, and says so
        screened = [e for e in self.entries if e.status == "screened" and e.job is not None]
        winner = min(screened, key=_wall, default=None)
        if winner is None:
            return None, []
        return winner, [f"{winner.label} wins on its screen alone: the budget confirmed no point"]

    def _unconfirmed(self, winner: Entry) -> list[str]:
        """What the confirmations left: points projected to finish sooner on a screen alone."""
        return [
            f"{entry.label} projects {entry.job.wall_s if entry.job else 0:,.0f} s on "
            f"{entry.basis} alone, below the winner's {_wall(winner):,.0f} s; not confirmed "
            f"(at most {CONFIRM_MAX} confirmations, or the budget)"
            for entry in self.entries
            if entry.status in ("predicted", "screened") and _wall(entry) < _wall(winner)
        ]

    def _verdict(self, compared: tuple[str, ...]) -> str:
        """What was measured, what was not and why: no winner without two configurations."""
        configs = dict.fromkeys(e.point.config for e in self.entries)
        missing = [self._not_measured(config) for config in configs if config.label not in compared]
        measured = ", ".join(compared) if compared else "no configuration"
        return (
            f"no winner: a winner needs two configurations measured at their own points; measured: "
            f"{measured}; not measured: {'; '.join(missing) or 'none'}"
        )

    def _not_measured(self, config: Variant) -> str:
        """The configuration and why it was not measured: its first failure or refusal."""
        rows = [e for e in self.entries if e.point.config == config]
        why = next((e for e in rows if e.status in ("failed", "refused")), None) or rows[0]
        return f"{config.label} ({why.status}: {why.reason or 'no rate measured'})"


def _of_another_configuration(waiting: list[Entry], measured: list[Entry]) -> Entry | None:
    """While one configuration has a full sample: the soonest waiting point of another."""
    confirmed = {e.point.config for e in measured}
    if len(confirmed) != 1:
        return None
    return next((e for e in waiting if e.point.config not in confirmed), None)


def _record(entry: Entry, trial: Trial, status: str) -> None:
    """The trial on its point's entry; a failed full sample leaves the point's screen standing."""
    if trial.ok and trial.rates.points:
        entry.trial, entry.status, entry.reason = trial, status, None
        return
    why = trial.reason or "nothing measured"
    if entry.trial is not None and entry.trial.ok:
        # its screen stands; the reason keeps it from being confirmed again
        entry.reason = f"its full sample failed: {why}"
        return
    entry.trial, entry.status, entry.reason = trial, "failed", why


def _kv_bound_below(entry: Entry, cap: int) -> bool:
    """Whether the point is a KV-bound cap below `cap`, not yet measured."""
    return (
        entry.status == "predicted"
        and (entry.origin or "").startswith("KV-bound")
        and (entry.point.running_cap or 0) < cap
    )


def _preemptions(entry: Entry) -> int | None:
    """The requests the engine preempted during the point's latest trial (None: not known)."""
    return entry.trial.preemptions if entry.trial is not None else None


def _wall(entry: Entry) -> float:
    return entry.job.wall_s if entry.job is not None else math.inf


def _predicted(entry: Entry) -> float:
    return entry.predicted.wall_s if entry.predicted is not None else math.inf


def _unscreened(entry: Entry, source: Entry | None) -> str:
    if source is None:
        return f"its configuration ({entry.point.config.label}) was not screened"
    return f"its configuration's screen ({source.label}) {source.status}: {source.reason}"
