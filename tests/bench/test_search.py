"""The search against stand-in engines whose speed follows their argv (standin.py's
speed model), played out in simulated time: every measurement is the stand-in's batch loop
stepped in simulated seconds, read back through the same per-request timings a real sample
gives. So the search's work is counted (simulated seconds, trials), never timed.

Exhaustive = every point that fits, measured with the full sample; the search must find a
point within 2% of the exhaustive best in under a third of the exhaustive work.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from specpilot.bench.client import RequestTiming
from specpilot.bench.jobtime import batch_rates
from specpilot.bench.search import Job, Planned, Trial, cap_points, search
from specpilot.bench.variants import Variant
from specpilot.projection import BatchRates, JobTime, project_job
from tests.fakeengines.standin import prefill_graph, profile_at, step_seconds, tokens_per_s

FRACTION, GRAPH_OFF = "--mem-fraction-static", "--disable-prefill-cuda-graph"
START_S = 30.0  # an engine's start and warm-up, counted for every measurement alike
INPUT_ROWS = 50_000
FULL_ROWS = 256


def sample_lengths(rows: int = FULL_ROWS, seed: int = 5) -> list[int]:
    """Output lengths with a long tail (thinking traces): log-normal, mean about 600."""
    rng = random.Random(seed)
    return [max(8, int(rng.lognormvariate(math.log(600) - 0.32, 0.8))) for _ in range(rows)]


def played(
    profiles: dict[str, Any], point: Variant, cap: int, lengths: list[int], graph: bool = True
) -> list[RequestTiming]:
    """The stand-in's batch loop in simulated time: `cap` requests in flight, every step each
    running request gets `accept` tokens (a request's first step also prefills it, slower
    without the prefill graph); the answers' timings as the streaming client logs them."""
    steps = point.draft_tokens
    queue = list(enumerate(lengths))
    running: dict[int, tuple[float, int]] = {}  # id -> (start, target)
    got: dict[int, float] = {}
    stamps: dict[int, list[float]] = {}
    done: list[RequestTiming] = []
    now = 0.0
    while queue or running:
        while queue and len(running) < cap:
            rid, target = queue.pop(0)
            running[rid], got[rid], stamps[rid] = (now, target), 0.0, []
        profile = profile_at(profiles, steps, point.adaptive, len(running))
        joining = sum(1 for rid in running if got[rid] == 0)
        now += step_seconds(profile, len(running), joining, graph)
        for rid in list(running):
            start, target = running[rid]
            got[rid] += float(profile["accept"])
            stamps[rid].append(now)
            if got[rid] >= target:
                times = stamps[rid]
                gaps = tuple(b - a for a, b in itertools.pairwise(times))
                done.append(RequestTiming(start, now - start, times[0] - start, gaps, target, "stop"))
                del running[rid]
    return done


@dataclass
class StandinLab:
    """The measurer over simulated stand-ins: plan's maximum per configuration, and costs."""

    profiles: dict[str, Any]
    most: dict[str, int | None]
    lengths: list[int]
    trials: list[tuple[str, int]] = field(default_factory=list)
    #: configuration label -> the other side of the prefill-graph gate its plan names
    sides: dict[str, Variant] = field(default_factory=dict)
    #: the memory fraction of a configuration that sets none of its own (the stand-in's gate reads it)
    fraction: float = 0.95

    def plan(self, point: Variant) -> Planned:
        most = self.most.get(point.config.label)
        if most is None:
            return Planned(None, "it does not fit: the plan leaves no KV for one request")
        if point.running_cap is not None and point.running_cap > most:
            return Planned(None, f"the plan's most is {most}")
        side = self.sides.get(point.label) if point.running_cap is None else None
        return Planned(point.running_cap or most, other_side=side)

    def graph(self, point: Variant) -> bool:
        """Whether the stand-in captures the point's prefill graph, as its argv says."""
        args = list(point.side_args)
        fraction = float(args[args.index(FRACTION) + 1]) if FRACTION in args else self.fraction
        return prefill_graph(self.profiles[str(point.draft_tokens)], fraction, GRAPH_OFF in args)

    async def measure(self, point: Variant, rows: int, budget_s: float) -> Trial:
        return self.played(point, rows)

    def played(self, point: Variant, rows: int) -> Trial:
        """The point run on `rows` rows of the stand-in."""
        cap = point.running_cap or self.most[point.config.label] or 1
        lengths = [self.lengths[i * len(self.lengths) // rows] for i in range(rows)]
        timings = played(self.profiles, point, cap, lengths, self.graph(point))
        self.trials.append((point.label, rows))
        cost_s = START_S + max(t.start_s + t.latency_s for t in timings)
        return Trial(True, None, batch_rates(timings), tuple(lengths), cost_s)


def exhaustive(lab: StandinLab, configs: list[Variant]) -> tuple[dict[str, JobTime], float]:
    """Every point that fits at the full sample: its projected job, and the work it took."""
    found: dict[str, JobTime] = {}
    cost_s = 0.0
    for config in [*configs, *lab.sides.values()]:
        most = lab.most.get(config.label)
        for cap in cap_points(most) if most else ():
            point = config.at(cap)
            trial = lab.played(point, FULL_ROWS)
            cost_s += trial.cost_s
            found[point.label] = project_job(lab.lengths, INPUT_ROWS, cap, trial.rates.rate_at)
    return found, cost_s


CONFIGS = [Variant(), Variant("NEXTN", 1), Variant("NEXTN", 2), Variant("NEXTN", 3)]
MOST = {"plain": 64, "NEXTN-1": 48, "NEXTN-2": 40, "NEXTN-3": 32}

#: past its captured graphs (26 requests) every step is 1.8x slower: the best cap is lower
#: than the plan's maximum, for plain and for every draft depth
GRAPH_BOUND = {
    "0": {
        "step_s": 0.02,
        "step_per_request_s": 0.0003,
        "accept": 1.0,
        "graph_max_bs": 26,
        "eager_factor": 1.8,
    },
    "1": {
        "step_s": 0.024,
        "step_per_request_s": 0.0006,
        "accept": 1.7,
        "graph_max_bs": 26,
        "eager_factor": 1.8,
    },
    "2": {
        "step_s": 0.028,
        "step_per_request_s": 0.0009,
        "accept": 2.3,
        "graph_max_bs": 26,
        "eager_factor": 1.8,
    },
    "3": {
        "step_s": 0.032,
        "step_per_request_s": 0.0012,
        "accept": 2.8,
        "graph_max_bs": 26,
        "eager_factor": 1.8,
    },
}
#: drafting costs more per running request than it saves at large batches: speculation wins
#: at small batches, plain at the plan's large one
SPEC_FLIPS = {
    "0": {"step_s": 0.02, "step_per_request_s": 0.0003, "accept": 1.0},
    "1": {"step_s": 0.024, "step_per_request_s": 0.0012, "accept": 1.8},
    "2": {"step_s": 0.028, "step_per_request_s": 0.0020, "accept": 2.4},
    "3": {"step_s": 0.032, "step_per_request_s": 0.0028, "accept": 2.9},
}


@pytest.mark.parametrize("profiles", [GRAPH_BOUND, SPEC_FLIPS], ids=["best-below-max-cap", "spec-flips"])
def test_the_search_finds_the_exhaustive_best_for_a_third_of_the_work(profiles: dict[str, Any]) -> None:
    lengths = sample_lengths()
    truth, exhaustive_s = exhaustive(StandinLab(profiles, MOST, lengths), CONFIGS)
    best_label = min(truth, key=lambda label: truth[label].wall_s)
    lab = StandinLab(profiles, MOST, lengths)
    result = asyncio.run(search(CONFIGS, lab, Job(INPUT_ROWS), full_rows=FULL_ROWS, budget_s=1e9))
    assert result.winner is not None
    found = truth[result.winner.label].wall_s
    assert found <= truth[best_label].wall_s * 1.02, (result.winner.label, best_label)
    assert result.spent_s < exhaustive_s / 3, (result.spent_s, exhaustive_s, lab.trials)
    # every configuration was screened once at its largest cap with one batch of rows
    screens = [(label, rows) for label, rows in lab.trials if rows < FULL_ROWS]
    assert screens == [(f"{c.label}@{MOST[c.label]}", MOST[c.label]) for c in CONFIGS]
    statuses = {e.label: e.status for e in result.entries}
    assert len(statuses) == 12 and statuses[result.winner.label] == "measured"
    assert all(e.job is not None and e.job.tail_s > 0 for e in result.entries)


def test_the_scenarios_are_what_they_claim() -> None:
    """The exhaustive bests: below the plan's cap in one, plain at its cap in the other while
    speculation is faster at small batches."""
    lengths = sample_lengths()
    graph, _ = exhaustive(StandinLab(GRAPH_BOUND, MOST, lengths), CONFIGS)
    best = min(graph, key=lambda label: graph[label].wall_s)
    config, cap = best.split("@")
    assert int(cap) < MOST[config]
    flips, _ = exhaustive(StandinLab(SPEC_FLIPS, MOST, lengths), CONFIGS)
    assert min(flips, key=lambda label: flips[label].wall_s) == "plain@64"
    for k in ("1", "2", "3"):
        assert tokens_per_s(SPEC_FLIPS, int(k), False, 4) > tokens_per_s(SPEC_FLIPS, 0, False, 4)
        assert tokens_per_s(SPEC_FLIPS, int(k), False, 40) < tokens_per_s(SPEC_FLIPS, 0, False, 40)


def test_adaptive_speculation_drafts_below_its_threshold_only() -> None:
    profiles = {**SPEC_FLIPS, "3": {**SPEC_FLIPS["3"], "adaptive_from": 16}}
    assert tokens_per_s(profiles, 3, True, 8) == tokens_per_s(profiles, 3, False, 8)
    assert tokens_per_s(profiles, 3, True, 32) == tokens_per_s(profiles, 0, False, 32)


def test_a_point_plan_refuses_is_never_started_and_a_failed_screen_stops_its_caps() -> None:
    lengths = sample_lengths()

    class Flaky(StandinLab):
        async def measure(self, point: Variant, rows: int, budget_s: float) -> Trial:
            if point.method == "NEXTN" and point.draft_tokens == 1:
                self.trials.append((point.label, rows))
                return Trial(False, "did not start (capture, oom)", batch_rates([]), (), 5.0)
            return await super().measure(point, rows, budget_s)

    lab = Flaky(SPEC_FLIPS, {**MOST, "NEXTN-3": None}, lengths)
    result = asyncio.run(search(CONFIGS, lab, Job(INPUT_ROWS), full_rows=FULL_ROWS, budget_s=1e9))
    rows = {e.label: e for e in result.entries}
    assert rows["NEXTN-3"].status == "refused" and "does not fit" in (rows["NEXTN-3"].reason or "")
    assert not any(label.startswith("NEXTN-3") for label, _ in lab.trials)
    assert rows["NEXTN-1@48"].status == "failed" and "capture" in (rows["NEXTN-1@48"].reason or "")
    assert rows["NEXTN-1@24"].status == "not started" and "failed" in (rows["NEXTN-1@24"].reason or "")
    assert result.winner is not None and result.winner.label.startswith("plain")


def test_a_budget_too_small_for_one_point_starts_nothing() -> None:
    lab = StandinLab(SPEC_FLIPS, MOST, sample_lengths())
    result = asyncio.run(
        search(CONFIGS, lab, Job(INPUT_ROWS), full_rows=FULL_ROWS, budget_s=20.0, least_s=30.0)
    )
    assert not result.started and result.winner is None and not lab.trials
    assert {e.status for e in result.entries} == {"not started"}
    assert all(
        "budget" in (e.reason or "")
        for e in result.entries
        if e.point.running_cap == MOST[e.point.config.label]
    )


def test_the_tail_is_the_time_after_the_last_row_starts() -> None:
    # 8 rows, cap 4, 100 tok/s per request at any batch: two waves of 400-token answers take
    # 8 s; one 4000-token answer in the second wave alone runs 36 s longer: a tail of 40 s
    job = project_job([400] * 7 + [4000], 8, 4, lambda b: 100.0 * b)
    assert job.wall_s == pytest.approx(44.0) and job.tail_s == pytest.approx(40.0)
    assert job.tail_share == pytest.approx(40 / 44) and job.waves == 2.0
    # the same mean length without the long answer: no tail beyond one answer
    even = project_job([850] * 8, 8, 4, lambda b: 100.0 * b)
    assert even.wall_s == pytest.approx(17.0) and even.tail_s == pytest.approx(8.5)


def test_a_long_job_adds_its_middle_at_the_caps_rate() -> None:
    short = project_job([100, 300], 40_000, 8, lambda b: 50.0 * b)
    longer = project_job([100, 300], 80_000, 8, lambda b: 50.0 * b)
    # 40,000 more rows of 200 tokens at 400 tok/s: 20,000 s more
    assert longer.wall_s - short.wall_s == pytest.approx(20_000, rel=1e-3)
    assert longer.gpu_hours == pytest.approx(longer.wall_s / 3600)
    two = project_job([100, 300], 80_000, 8, lambda b: 50.0 * b, servers=2, gpus_per_server=2)
    assert two.wall_s == pytest.approx(short.wall_s, rel=1e-6) and two.gpu_hours == pytest.approx(
        4 * two.wall_s / 3600
    )


def test_batch_rates_read_the_drain() -> None:
    # 4 requests start together at 300 tok/s each (one chunk a token); they end at 1, 2, 3, 4 s
    gap_s = 1 / 300
    timings = [
        RequestTiming(0.0, float(n), gap_s, tuple([gap_s] * (300 * n - 1)), 300 * n, "stop")
        for n in (1, 2, 3, 4)
    ]
    rates = batch_rates(timings)
    assert len(rates.points) == 4 and rates.largest == 4
    for batch in (1, 2, 3, 4):
        assert rates.rate_at(batch) == pytest.approx(300.0 * batch, rel=0.02)
    assert rates.rate_at(8) == pytest.approx(1200.0, rel=0.02)  # no gain assumed past the largest
    assert rates.capped(2).rate_at(4) == pytest.approx(600.0, rel=0.02)  # a cap of 2 never runs 4


def test_a_level_with_no_progress_is_left_out_and_no_rate_projects_nothing() -> None:
    """A pool with no tokens (requests that only queued there) says nothing: the rate comes
    from the others; rates with no progress anywhere project no time, not infinity."""
    rates = BatchRates(((10.0, 0.0, 5.0), (5.0, 500.0, 5.0)), 10)
    assert rates.rate_at(10) == pytest.approx(100.0) and rates.rate_at(2) == pytest.approx(40.0)

    class Stalled(StandinLab):
        async def measure(self, point: Variant, rows: int, budget_s: float) -> Trial:
            return Trial(True, None, BatchRates(((4.0, 0.0, 1.0),), 4), (10,) * rows, 5.0)

    result = asyncio.run(
        search([Variant()], Stalled(SPEC_FLIPS, MOST, sample_lengths()), Job(100), full_rows=8, budget_s=1e9)
    )
    assert result.winner is None and all(e.job is None for e in result.entries)


def test_a_refill_lag_shorter_than_a_step_is_no_batch() -> None:
    """Two requests at 100 tok/s each; the client refills the first slot 5 ms late (shorter
    than the 10 ms between chunks): those 5 ms count as two in flight, so the rate at two is
    the engine's 200 tok/s, not one starved by the gap's misplaced chunks."""
    gap_s = 0.01
    timings = [
        RequestTiming(0.0, 1.0, gap_s, tuple([gap_s] * 99), 100, "stop"),
        RequestTiming(1.005, 0.995, gap_s, tuple([gap_s] * 98), 99, "stop"),
        RequestTiming(0.0, 2.0, gap_s, tuple([gap_s] * 199), 200, "stop"),
    ]
    rates = batch_rates(timings)
    assert rates.largest == 2 and len(rates.points) == 1
    assert rates.rate_at(2) == pytest.approx(200.0, rel=0.02)
    # below every measured batch, the same speed per request
    assert rates.capped(1).rate_at(1) == pytest.approx(100.0, rel=0.02)


#: plain's plan lands below the prefill-graph gate at 0.95 (the stand-in captures its graph up to
#: 0.94): the other side keeps the graph at 0.93 with less KV (52 requests instead of 64)
KEPT = Variant(prefill_graph="kept", side_args=(FRACTION, "0.93", "--max-running-requests", "52"))
#: plain's plan lands just above the gate at 0.93: the other side turns the graph off and gives
#: its room to KV (80 requests)
OFF = Variant(prefill_graph="off", side_args=(GRAPH_OFF,), replan=True)


def _gated(prefill_s: float, eager_factor: float) -> dict[str, Any]:
    plain = {**SPEC_FLIPS["0"], "prefill_s": prefill_s, "prefill_eager_factor": eager_factor}
    return {**SPEC_FLIPS, "0": {**plain, "prefill_graph_to_fraction": 0.94}}


#: prefill costs much more without its graph: the graph wins however it is kept
PREFILL_HEAVY = _gated(0.02, 6.0)
#: prefill costs little more without it: more running requests win
PREFILL_LIGHT = _gated(0.0005, 1.5)


@pytest.mark.parametrize(
    ("profiles", "side", "fraction", "better"),
    [
        (PREFILL_HEAVY, KEPT, 0.95, "plain-graph-kept"),
        (PREFILL_LIGHT, KEPT, 0.95, "plain"),
        (PREFILL_HEAVY, OFF, 0.93, "plain"),
        (PREFILL_LIGHT, OFF, 0.93, "plain-graph-off"),
    ],
    ids=["heavy-keeps-graph", "light-keeps-kv", "heavy-keeps-graph-on", "light-turns-graph-off"],
)
def test_the_search_measures_the_gate_s_other_side_and_finds_the_better_side(
    profiles: dict[str, Any], side: Variant, fraction: float, better: str
) -> None:
    """Where the plan names the gate's other side, that configuration joins the search (screened
    like the others, never at a cap above its own plan's); the winner is within 2% of the
    exhaustive best, which lies on the side the scenario claims."""
    lengths = sample_lengths()
    most = {**MOST, "plain-graph-kept": 52, "plain-graph-off": 80}
    configs = [Variant(), Variant("NEXTN", 1)]

    def lab() -> StandinLab:
        return StandinLab(profiles, most, lengths, sides={"plain": side}, fraction=fraction)

    truth, exhaustive_s = exhaustive(lab(), configs)
    best_label = min(truth, key=lambda label: truth[label].wall_s)
    assert best_label.split("@")[0] == better, best_label
    searcher = lab()
    result = asyncio.run(search(configs, searcher, Job(INPUT_ROWS), full_rows=FULL_ROWS, budget_s=1e9))
    assert result.winner is not None
    assert truth[result.winner.label].wall_s <= truth[best_label].wall_s * 1.02, (
        result.winner.label,
        best_label,
    )
    assert result.winner.label.split("@")[0] == better
    assert result.spent_s < exhaustive_s / 3
    screened = [label for label, rows in searcher.trials if rows < FULL_ROWS]
    assert f"{side.label}@{most[side.label]}" in screened
    assert {e.label for e in result.entries} >= {
        f"{side.label}@{cap}" for cap in cap_points(most[side.label])
    }
