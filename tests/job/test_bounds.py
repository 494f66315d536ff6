"""Each engine's bounding rule on its own (`engines/bounds.py`), as the recovery policy applies
it: which death it matches and the flag it lowers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

import pytest

from specpilot.check.resolved import resolve
from specpilot.engines.bounds import flag_value
from specpilot.engines.registry import ENGINES
from specpilot.launch.recovery import Budget, Recovery, next_start, serving_death
from specpilot.launch.server_plan import server_plan
from specpilot.launch.serving import Crash
from specpilot.launch.state import RunState
from specpilot.spec import Spec
from tests.launch.conftest import SpecFactory

COW_OOM = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    "    self._maybe_execute_deferred_mamba_cow_and_clear(forward_batch)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.06 GiB."
)
PLAIN_OOM = (
    "Scheduler hit an exception:\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB."
)
#: the CUDA runtime's name for the error alone, as SGLang 0.5.17 printed it on the H200
#: (tests/data/startup_logs/sglang-h200/r17-plain-rec-96.log), without "out of memory"
ALLOCATION_OOM = "Scheduler hit an exception:\nRuntimeError: CUDA driver error: cudaErrorMemoryAllocation"
BARE = Crash("crash", None, "the engine process exited without a known error line", -9)


def _spec(make_spec: SpecFactory, args: list[str], engine: str = "sglang") -> Spec:
    return make_spec("sglang_ready" if engine == "sglang" else "vllm_ready", engine=engine, args=args)


def _after(spec: Spec, serving_log: str) -> Recovery:
    """What the policy starts after `spec` died while serving, its log since ready `serving_log`."""
    state = cast(RunState, SimpleNamespace(engine=spec.engine.name))
    _, failure = serving_death(BARE, state, serving_log)
    return asyncio.run(next_start(server_plan(resolve(spec)), failure, Budget(max_restarts=1)))


def test_copy_on_write_oom_halves_the_running_requests_into_prefill_max_requests(
    make_spec: SpecFactory,
) -> None:
    after = _after(_spec(make_spec, ["--max-running-requests", "48"]), COW_OOM)
    assert after.action == "bound" and after.bound is not None
    assert after.bound.rule.flag == "--prefill-max-requests"
    assert (after.bound.before, after.bound.after) == (None, 24)
    assert flag_value(list(after.spec.engine.args), "--prefill-max-requests") == 24


def test_a_set_prefill_max_requests_is_halved_until_one(make_spec: SpecFactory) -> None:
    after = _after(_spec(make_spec, ["--prefill-max-requests=6"]), COW_OOM)
    assert after.bound is not None and (after.bound.before, after.bound.after) == (6, 3)
    assert after.spec.engine.args == ["--prefill-max-requests", "3"]
    at_one = _spec(make_spec, ["--prefill-max-requests", "1"])
    assert _after(at_one, COW_OOM).action == "restart" and _after(at_one, COW_OOM).spec == at_one


@pytest.mark.parametrize("death", [PLAIN_OOM, ALLOCATION_OOM])
def test_another_serving_oom_lowers_the_running_requests(make_spec: SpecFactory, death: str) -> None:
    after = _after(_spec(make_spec, ["--max-running-requests", "32"]), death)
    assert after.bound is not None and after.bound.rule.flag == "--max-running-requests"
    assert after.bound.after == 16


def test_vllm_lowers_max_num_seqs(make_spec: SpecFactory) -> None:
    after = _after(_spec(make_spec, [], engine="vllm"), PLAIN_OOM)
    assert after.bound is not None and after.bound.rule.flag == "--max-num-seqs" and after.bound.after == 256


def test_a_death_that_is_not_memory_is_restarted_as_it_was(make_spec: SpecFactory) -> None:
    died = "Scheduler hit an exception:\n    self._maybe_execute_deferred_mamba_cow_and_clear(batch)\nValueError: x"
    spec = _spec(make_spec, [])
    after = _after(spec, died)
    assert (after.action, after.bound, after.spec) == ("restart", None, spec)


def test_every_rule_names_its_source() -> None:
    rules = [rule for engine in ENGINES for rule in engine.serving_bounds]
    assert rules and all(rule.source and rule.what for rule in rules)


def test_a_death_found_before_its_last_lines_were_read_is_told_from_the_whole_log() -> None:
    """The watcher can find the process gone before it read the fatal lines: its verdict is a
    bare crash; the whole log since ready says it was the copy-on-write OOM."""
    state = cast(RunState, SimpleNamespace(engine="sglang"))
    told, failure = serving_death(
        BARE, state, "[2026-12-02 00:03:21] Decode batch, #running-req: 64\n" + COW_OOM + "\n"
    )
    assert told.cause == "oom" and "mamba_cow" in told.error and told.exit_status == -9
    assert failure.cause == "oom" and failure.at == "serving"
    alive, _ = serving_death(BARE, state, "[2026-12-02 00:03:21] Decode batch, #running-req: 64\n")
    assert alive is BARE
