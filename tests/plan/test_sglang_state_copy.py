"""The hybrid state copy a batch of cached-prefix requests makes while serving, against the real
0.5.17 start on the H200 that died of it (tests/data/gpu-runs/sglang-0.5.17-h200-job/: the plan's
recommendation for the whole card, 119 requests; 64 prompts already in the radix cache sent again
ran out of memory in `MambaPool.copy_from`), and that start's measured startup peak."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.engines.sglang.phases import PHASES
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.planner import planner_settings
from specpilot.plan.startup_peak import measure_startup_peak
from specpilot.plan.types import GIB
from specpilot.spec import Spec, load_spec

JOB = Path(__file__).resolve().parents[1] / "data" / "gpu-runs" / "sglang-0.5.17-h200-job"
OOM = re.compile(
    r"OutOfMemoryError: CUDA out of memory\. Tried to allocate ([\d.]+) GiB\. .*? of which ([\d.]+) GiB is free"
)


def _spec(*extra: str) -> Spec:
    spec = load_spec(JOB / "plain.repo.toml")
    return spec.model_copy(
        update={"engine": spec.engine.model_copy(update={"args": [*spec.engine.args, *extra]})}
    )


def _ssm_state_gib(spec: Spec) -> float:
    shape, args = plan_inputs(spec)
    s = planner_settings(spec, shape, args)
    gdn = q.gdn_layer(shape, s.tp_size)
    assert gdn is not None
    return gdn.ssm_state_bytes(s.tp_size, s.ssm_dtype_bytes) * shape.linear_attention_layers / GIB


def test_the_engines_failed_allocation_is_a_whole_number_of_state_copies() -> None:
    text = (JOB / "engine.log").read_text()
    assert "_maybe_execute_deferred_mamba_cow_and_clear" in text
    found = OOM.search(text)
    assert found is not None
    tried_gib, free_gib = float(found[1]), float(found[2])
    copies = tried_gib / _ssm_state_gib(_spec())
    assert copies == pytest.approx(round(copies), abs=0.05)  # 36 copies of 144 MiB
    assert round(copies) <= 64 <= make_plan(resolve(_spec())).max_running_requests
    assert tried_gib > free_gib


def test_the_plan_warns_and_names_the_bound_that_fits() -> None:
    plan = make_plan(resolve(_spec()))
    warning = next(note for note in plan.notes if "copies their SSM states" in note)
    per_state = _ssm_state_gib(_spec())
    assert f"batch of {plan.max_running_requests} requests" in warning
    fitting = int(re.search(r"--prefill-max-requests (\d+)", warning)[1])  # type: ignore[index]
    assert 0 < fitting * per_state <= plan.details.margin_gib < (fitting + 1) * per_state  # type: ignore[union-attr]
    # the engine's 36 copies (5.06 GiB) needed more than that
    assert 36 * per_state > plan.details.margin_gib  # type: ignore[union-attr]


@pytest.mark.parametrize("extra", [["--disable-radix-cache"], ["--prefill-max-requests", "4"]])
def test_no_warning_where_the_copies_are_bounded(extra: list[str]) -> None:
    assert not [note for note in make_plan(resolve(_spec(*extra))).notes if "copies their SSM states" in note]


def test_the_recorded_start_peaks_in_prefill_graph_capture() -> None:
    """Measured (NVML, 20 ms): 1.50 GiB free at the lowest point of the start, in the prefill
    graph capture, which dropped 5.3 GiB below where it began although it keeps about 3."""
    peak = measure_startup_peak(JOB, (JOB / "engine.log").read_text(), PHASES)
    assert peak.ready
    assert peak.phase == "graph: target prefill"
    assert peak.lowest_free_gib == pytest.approx(1.50, abs=0.01)
    prefill = next(p for p in peak.phases if p.name == "graph: target prefill")
    assert prefill.drop_gib > 5.0
    decode = next(p for p in peak.phases if p.name == "graph: target decode")
    assert prefill.free_at_start_gib - decode.free_at_start_gib == pytest.approx(2.97, abs=0.1)
    serving = next(p for p in peak.phases if p.name == "serving")
    assert serving.lowest_free_gib < peak.lowest_free_gib  # the runtime went lower than the start
