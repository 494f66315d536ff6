"""What a bench expects its starts and measurements to cost before anything starts, and how
it counts the requests an engine took off for KV room."""

from __future__ import annotations

import asyncio

import pytest

from specpilot.bench.budget import ASSUMED_TOKENS_PER_S_PER_REQUEST, Costs, StartCosts, start_costs
from specpilot.bench.measure import _preemptions, count_preemptions
from specpilot.check.resolved import release_of
from specpilot.engines.registry import engine_by_name
from specpilot.errors import UserError
from specpilot.launch.state import write_state
from specpilot.spec import load_spec
from tests.bench.conftest import SpecFactory
from tests.launch.helpers import ready_state

PROFILES = {"0": {"step_s": 0.02, "accept": 1.0, "cap": 4}}


def test_starts_recorded_on_this_host_give_the_expected_start(bench_spec: SpecFactory) -> None:
    spec = load_spec(bench_spec(PROFILES))
    assert spec.engine.name == "sglang" and spec.engine.version == "0.5.13"
    # nothing recorded: the engine's stated estimate, the first apart, at most the ready timeout
    fresh = start_costs(spec, release_of(spec))
    stated = engine_by_name("sglang").start
    timeout_s = spec.server.ready_timeout_s
    assert (fresh.first_s, fresh.later_s) == (min(stated.first_s, timeout_s), min(stated.later_s, timeout_s))
    assert "compiles kernels" in fresh.basis and "no start of SGLang 0.5.13 recorded on local" in fresh.basis
    for name, ready_s in (("a", 3.0), ("b", 5.0), ("c", 4.0)):
        write_state(ready_state(name, ready_s=ready_s))
    write_state(ready_state("other-release", engine_version="0.5.17", ready_s=200.0))
    write_state(ready_state("never-ready", phase="failed", ready_s=None))
    recorded = start_costs(spec, release_of(spec))
    assert (recorded.first_s, recorded.later_s) == (4.0, 4.0)
    assert recorded.basis == "the median of 3 starts of SGLang 0.5.13 recorded on local"


def test_the_least_budget_is_two_screens_and_names_the_budget_that_can() -> None:
    costs = Costs(StartCosts(60.0, 20.0, "stated"), warmup_s=30.0, max_tokens=40)
    need = costs.need([64, 48, 32], full_rows=128)
    wave_s = 40 / ASSUMED_TOKENS_PER_S_PER_REQUEST
    warmup_s = 32 / ASSUMED_TOKENS_PER_S_PER_REQUEST  # one batch of the warm-up's short answers
    assert need.least_s == pytest.approx(60 + 20 + 2 * (warmup_s + wave_s))
    assert need.expected_s > need.least_s + 20
    need.check(need.least_s, 3)
    with pytest.raises(UserError) as refused:
        need.check(80.0, 3)
    assert str(refused.value).startswith(
        "--budget-s: 80 s cannot measure two configurations: they need about 88 s"
    )
    assert f"pass --budget-s {int(need.least_s) + 1} or more" in refused.value.fix


#: SGLang's scheduler, as a KV-bound H100 run logged it
RETRACT_LOG = """\
[2026-09-13 16:06:07] Decode batch, #running-req: 66, #token: 87282, token usage: 1.00, cuda graph: False
[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487
[2026-09-13 16:06:08] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.3397 -> 0.3530
"""


def test_sglang_retractions_are_counted_from_its_log() -> None:
    signal = engine_by_name("sglang").preemption
    assert signal is not None and signal.word == "retractions"
    assert count_preemptions(signal, RETRACT_LOG) == 4
    assert count_preemptions(signal, "Decode batch, #running-req: 12\n") == 0


def test_vllm_preemptions_are_its_counter(bench_spec: SpecFactory) -> None:
    signal = engine_by_name("vllm").preemption
    assert signal is not None and signal.counter == "vllm:num_preemptions_total" and signal.log_line is None
    # the counter's growth over the sample is the count; no log line is read for it
    counted = asyncio.run(_preemptions(load_spec(bench_spec(PROFILES)), signal, 2.0, 7.0))
    assert counted == (5, "preemptions: /metrics vllm:num_preemptions_total")
    assert count_preemptions(signal, RETRACT_LOG) == 0
