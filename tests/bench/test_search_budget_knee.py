"""The search's budget, its comparison rule and its knee, against in-process stand-ins whose
speed follows the point (tests/fakeengines/standin.py's step model) and whose KV cache holds
`kv_tokens`: a step that no longer fits retracts the request with the most tokens written
back to the engine's queue (SGLang's retraction), and it is prefilled again, prompt and answer
so far, when it rejoins. Every measurement is played in simulated seconds (start, warm-up,
sample), so the work is counted, never timed.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections import deque
from dataclasses import dataclass, field

import pytest

from specpilot.bench.client import RequestTiming
from specpilot.bench.jobtime import batch_rates
from specpilot.bench.search import Job, Planned, SearchResult, Trial, kv_bound_cap, search
from specpilot.bench.variants import Variant
from specpilot.projection import project_job
from tests.fakeengines.standin import step_seconds

INPUT_ROWS = 20_000
PROMPT_TOKENS = 200
WARMUP_S = 3.0
#: a 27B-like step: 20 ms a step, 0.3 ms more per running request; a rejoining request's
#: prompt and answer so far are prefilled again at 0.6 ms a token
PLAIN = {"step_s": 0.02, "step_per_request_s": 0.0003, "accept": 1.0, "recompute_s_per_token": 0.0006}
#: drafting 3 tokens: more per step at small batches, dearer per running request
MTP3 = {"step_s": 0.03, "step_per_request_s": 0.0012, "accept": 2.2, "recompute_s_per_token": 0.0006}


def sample_lengths(rows: int, seed: int = 5, mean: int = 120) -> list[int]:
    """Output lengths with a long tail: log-normal, mean about `mean`."""
    rng = random.Random(seed)
    return [max(8, int(rng.lognormvariate(math.log(mean) - 0.32, 0.8))) for _ in range(rows)]


def played(
    profile: dict[str, float], cap: int, lengths: list[int], kv_tokens: int
) -> tuple[list[RequestTiming], int, float]:
    """`cap` requests in flight from the client, at most `cap` running in the engine while their
    KV fits: (the answers' timings as the streaming client logs them, retractions, seconds)."""
    rows = deque(enumerate(lengths))
    queue: deque[int] = deque()  # the engine's: a retracted request waits at its front
    running: list[int] = []
    got: dict[int, int] = {}
    start: dict[int, float] = {}
    stamps: dict[int, list[float]] = {}
    target: dict[int, int] = {}
    done: list[RequestTiming] = []
    now, retracted = 0.0, 0
    step = max(1, round(profile["accept"]))
    while rows or queue or running:
        while rows and len(queue) + len(running) < cap:
            rid, length = rows.popleft()
            got[rid], start[rid], stamps[rid], target[rid] = 0, now, [], length
            queue.append(rid)
        used = sum(PROMPT_TOKENS + got[r] for r in running)
        joining, recompute = 0, 0
        while queue and used + PROMPT_TOKENS + got[queue[0]] + step <= kv_tokens:
            rid = queue.popleft()
            running.append(rid)
            used += PROMPT_TOKENS + got[rid]
            joining += 1
            recompute += PROMPT_TOKENS + got[rid] if got[rid] else 0
        assert running, "the KV cache holds no request"
        now += step_seconds(profile, len(running), joining) + recompute * profile["recompute_s_per_token"]
        for rid in running:
            got[rid] = min(target[rid], got[rid] + step)
            stamps[rid].append(now)
        for rid in [r for r in running if got[r] >= target[r]]:
            running.remove(rid)
            times = stamps[rid]
            gaps = tuple(b - a for a, b in itertools.pairwise(times))
            done.append(
                RequestTiming(start[rid], now - start[rid], times[0] - start[rid], gaps, target[rid], "stop")
            )
        while sum(PROMPT_TOKENS + got[r] for r in running) > kv_tokens:
            victim = max(running, key=lambda r: got[r])
            running.remove(victim)
            queue.appendleft(victim)
            retracted += 1
    return done, retracted, now


@dataclass
class KvLab:
    """The measurer: per configuration label its speed profile, plan maximum and start time."""

    profiles: dict[str, dict[str, float]]
    most: dict[str, int]
    lengths: list[int]
    kv_tokens: int
    start_s: dict[str, float] = field(default_factory=dict)
    trials: list[tuple[str, int]] = field(default_factory=list)
    #: configuration label -> why it does not start
    dies: dict[str, str] = field(default_factory=dict)

    def plan(self, point: Variant) -> Planned:
        most = self.most[point.config.label]
        if point.running_cap is not None and point.running_cap > most:
            return Planned(None, f"the plan's most is {most}")
        return Planned(point.running_cap or most, kv_tokens=self.kv_tokens)

    async def measure(self, point: Variant, rows: int, budget_s: float) -> Trial:
        label = point.config.label
        start_s = self.start_s.get(label, 1.0)
        self.trials.append((point.label, rows))
        if label in self.dies or start_s > budget_s:
            why = self.dies.get(label, f"did not start within {budget_s:.0f} s")
            return Trial(False, why, batch_rates([]), (), min(start_s, budget_s))
        lengths = [self.lengths[i * len(self.lengths) // rows] for i in range(rows)]
        timings, retracted, sample_s = played(
            self.profiles[label], point.running_cap or self.most[label], lengths, self.kv_tokens
        )
        cost_s = start_s + WARMUP_S + sample_s
        if cost_s > budget_s:
            return Trial(False, "the budget ran out before the sample", batch_rates([]), (), budget_s)
        return Trial(
            True, None, batch_rates(timings), tuple(lengths), cost_s, None, (PROMPT_TOKENS,) * rows, retracted
        )

    def truth(self, point: Variant, full_rows: int) -> float:
        """The point's projected job on its own full sample (what an exhaustive search measures)."""
        lengths = [self.lengths[i * len(self.lengths) // full_rows] for i in range(full_rows)]
        cap = point.running_cap or self.most[point.config.label]
        timings, _, _ = played(self.profiles[point.config.label], cap, lengths, self.kv_tokens)
        return project_job(self.lengths, INPUT_ROWS, cap, batch_rates(timings).rate_at).wall_s


def run(
    configs: list[Variant], lab: KvLab, full_rows: int, budget_s: float, least_s: float = 4.0
) -> SearchResult:
    return asyncio.run(
        search(configs, lab, Job(INPUT_ROWS), full_rows=full_rows, budget_s=budget_s, least_s=least_s)
    )


#: 160 running requests planned; 9,000 KV tokens hold about 28 of the sample's mean length
KNEE = {"profiles": {"plain": PLAIN}, "most": {"plain": 160}, "kv_tokens": 9_000}


def test_the_knee_below_a_quarter_of_the_maximum_is_found() -> None:
    """The best cap lies at 15% of the plan's maximum (past it the KV cache retracts and every
    retraction is computed again): the search's winner is within 90% of the exhaustive best,
    where the maximum, half and a quarter reach about half of it."""
    lengths = sample_lengths(320)
    lab = KvLab(lengths=lengths, **KNEE)  # type: ignore[arg-type]
    truth = {cap: lab.truth(Variant().at(cap), 320) for cap in range(4, 161, 4)}
    best_cap = min(truth, key=lambda cap: truth[cap])
    assert 0.1 <= best_cap / 160 <= 0.2, best_cap
    assert all(truth[best_cap] / truth[cap] < 0.7 for cap in (160, 80, 40))
    result = run([Variant()], lab, 320, budget_s=1e9)
    assert result.winner is not None and result.winner.status == "measured"
    found = lab.truth(result.winner.point, 320)
    assert truth[best_cap] / found >= 0.9, (result.winner.label, best_cap, lab.trials)
    # the KV-bound cap joined the candidates, and the retractions of every point are kept
    kv_cap = kv_bound_cap(9_000, [PROMPT_TOKENS], lengths)
    rows = {e.label: e for e in result.entries}
    assert f"plain@{kv_cap}" in rows and "KV-bound" in (rows[f"plain@{kv_cap}"].origin or "")
    assert rows["plain@160"].trial is not None and (rows["plain@160"].trial.preemptions or 0) > 0


def mtp_flips() -> KvLab:
    """Plain and MTP-3 with a KV cache large enough for every cap: MTP wins at small batches,
    plain at its plan's maximum (the faster configuration there)."""
    return KvLab(
        profiles={"plain": PLAIN, "NEXTN-3": MTP3},
        most={"plain": 64, "NEXTN-3": 48},
        lengths=sample_lengths(128, mean=40),
        kv_tokens=10**9,
    )


CONFIGS = [Variant(), Variant("NEXTN", 3)]


def test_a_slow_first_start_is_measured_and_chosen_within_a_budget_that_holds_it() -> None:
    """A plain start of 60 s and --budget-s 200: each start gets what the budget holds (no fixed
    share decided up front), so plain is measured and, faster at its cap, chosen."""
    lab = mtp_flips()
    lab.start_s = {"plain": 60.0, "NEXTN-3": 1.0}
    truth = {f"{c.label}@{cap}": lab.truth(c.at(cap), 128) for c in CONFIGS for cap in (lab.most[c.label],)}
    assert min(truth, key=lambda label: truth[label]) == "plain@64"
    result = run(CONFIGS, lab, 128, budget_s=200.0)
    assert result.winner is not None and result.winner.label.startswith("plain@"), lab.trials
    assert result.compared == ("plain", "NEXTN-3") and result.spent_s <= 200.0


def test_a_60_s_budget_on_1_s_starts_measures_several_configurations() -> None:
    """Four configurations, 1-s starts, 60 s: the screens run one after another on what is left
    (the budget once left each 8 s, less than a start and warm-up, and nothing started)."""
    profiles = {"plain": PLAIN, "NEXTN-1": MTP3, "NEXTN-2": MTP3, "NEXTN-3": MTP3}
    lab = KvLab(profiles, {label: 24 for label in profiles}, sample_lengths(48, mean=60), 10**9)
    configs = [Variant(), Variant("NEXTN", 1), Variant("NEXTN", 2), Variant("NEXTN", 3)]
    result = run(configs, lab, 48, budget_s=60.0, least_s=10.0)
    assert result.winner is not None and len(result.compared) >= 2, lab.trials
    assert result.spent_s <= 60.0


def test_no_winner_without_a_comparison() -> None:
    """MTP does not start: plain alone was measured, so nothing is picked; the verdict says what
    was measured, what was not and why."""
    lab = mtp_flips()
    lab.dies = {"NEXTN-3": "did not start (capture, oom)"}
    result = run(CONFIGS, lab, 128, budget_s=1e9)
    assert result.winner is None and result.compared == ("plain",)
    assert result.verdict is not None
    assert (
        "measured: plain" in result.verdict
        and "NEXTN-3 (failed: did not start (capture, oom))" in result.verdict
    )
    # a predicted point (projected from plain's screen) never wins alone
    assert any(e.status == "predicted" and e.job is not None for e in result.entries)


def test_one_configuration_searched_alone_wins_and_says_nothing_was_compared() -> None:
    lab = mtp_flips()
    result = run([Variant()], lab, 128, budget_s=1e9)
    assert result.winner is not None and result.winner.label.startswith("plain@")
    assert result.compared == ("plain",) and result.verdict is None
    assert any("nothing was compared" in note for note in result.notes)


@pytest.mark.parametrize(
    ("kv", "prompts", "answers", "cap"), [(9_000, [200], [100, 140], 28), (10, [], [40], 1)]
)
def test_the_kv_bound_cap(kv: int, prompts: list[int], answers: list[int], cap: int) -> None:
    assert kv_bound_cap(kv, prompts, answers) == cap


def test_no_kv_bound_cap_without_lengths() -> None:
    assert kv_bound_cap(9_000, [200], []) is None
    assert kv_bound_cap(0, [200], [10]) is None
