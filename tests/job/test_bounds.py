"""Each bounding rule on its own: which death it matches and the flag it lowers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

from specpilot.job.bounds import BOUNDS, bound_for, flag_value
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


def _spec(make_spec: SpecFactory, args: list[str], engine: str = "sglang") -> Spec:
    return make_spec("sglang_ready" if engine == "sglang" else "vllm_ready", engine=engine, args=args)


def test_copy_on_write_oom_halves_the_running_requests_into_prefill_max_requests(
    make_spec: SpecFactory,
) -> None:
    bounded = bound_for(_spec(make_spec, ["--max-running-requests", "48"]), COW_OOM)
    assert bounded is not None and bounded.rule is BOUNDS[0]
    assert (bounded.before, bounded.after) == (None, 24)
    assert flag_value(list(bounded.spec.engine.args), "--prefill-max-requests") == 24


def test_a_set_prefill_max_requests_is_halved_until_one(make_spec: SpecFactory) -> None:
    bounded = bound_for(_spec(make_spec, ["--prefill-max-requests=6"]), COW_OOM)
    assert bounded is not None and (bounded.before, bounded.after) == (6, 3)
    assert bounded.spec.engine.args == ["--prefill-max-requests", "3"]
    assert bound_for(_spec(make_spec, ["--prefill-max-requests", "1"]), COW_OOM) is None


def test_another_serving_oom_lowers_the_running_requests(make_spec: SpecFactory) -> None:
    bounded = bound_for(_spec(make_spec, ["--max-running-requests", "32"]), PLAIN_OOM)
    assert bounded is not None and bounded.rule.flag == "--max-running-requests" and bounded.after == 16


def test_vllm_lowers_max_num_seqs(make_spec: SpecFactory) -> None:
    bounded = bound_for(_spec(make_spec, [], engine="vllm"), PLAIN_OOM)
    assert bounded is not None and bounded.rule.flag == "--max-num-seqs" and bounded.after == 256


def test_a_death_that_is_not_memory_is_restarted_as_it_was(make_spec: SpecFactory) -> None:
    died = "Scheduler hit an exception:\n    self._maybe_execute_deferred_mamba_cow_and_clear(batch)\nValueError: x"
    assert bound_for(_spec(make_spec, []), died) is None


def test_every_rule_names_its_source() -> None:
    assert all(rule.source and rule.what for rule in BOUNDS)


def test_a_death_found_before_its_last_lines_were_read_is_told_from_the_whole_log(
    make_spec: SpecFactory, tmp_path: Path
) -> None:
    """The watcher can find the process gone before it read the fatal lines: its verdict is a
    bare crash; the whole log since ready says it was the copy-on-write OOM."""
    from specpilot.job.heal import _whole
    from specpilot.launch.serving import Crash
    from specpilot.launch.state import RunState

    state = cast(RunState, SimpleNamespace(engine="sglang"))
    bare = Crash("crash", None, "the engine process exited without a known error line", -9)
    told = _whole(bare, state, "[2026-12-02 00:03:21] Decode batch, #running-req: 64\n" + COW_OOM + "\n")
    assert told.cause == "oom" and "mamba_cow" in told.error and told.exit_status == -9
    assert _whole(bare, state, "[2026-12-02 00:03:21] Decode batch, #running-req: 64\n") is bare
