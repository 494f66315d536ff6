"""`LogFacts`: one typed field per quantity any engine's log declares, each with its role;
calibration feeds back only the measured inputs, in the order the log printed them."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from specpilot.engines.adapter import Engine
from specpilot.engines.logfacts import ROLES, LogFacts, Role
from specpilot.engines.loglines import read_log
from specpilot.engines.registry import ENGINES, engine_by_name

LOGS = Path(__file__).resolve().parents[1] / "data" / "startup_logs"


def _facts(engine: str, log: str) -> LogFacts:
    text = (LOGS / log).read_text(errors="replace")
    return LogFacts.from_values(read_log(engine_by_name(engine).log.quantities, text))


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_every_quantity_an_engine_declares_is_a_field(engine: Engine) -> None:
    declared = {q.key for q in engine.log.quantities}
    assert declared <= set(ROLES), declared - set(ROLES)


def test_every_field_but_the_printing_order_has_a_role() -> None:
    for f in fields(LogFacts):
        assert f.name == "printed" or isinstance(f.metadata.get("role"), Role), f.name


def test_an_sglang_start_feeds_back_its_measured_inputs_in_printing_order() -> None:
    facts = _facts("sglang", "sglang-h200/r17-mtp-rec-96.log")
    assert (facts.kv_tokens, facts.max_running_requests, facts.tp_size) == (36256, 23, 1)
    assert list(facts.measured_inputs().items()) == [
        ("chunked_prefill_size", 8192.0),
        ("mem_fraction_static", 0.94),
        ("free_before_load_gib", 94.93),
        ("weights_gib", 51.05),
        ("draft_weights_gib", 5.53),
        ("draft_kv_tokens", 36256.0),
    ]


def test_a_vllm_start_feeds_back_its_measured_inputs_in_printing_order() -> None:
    facts = _facts("vllm", "vllm/h200-hybrid-mtp-96.log")
    assert (facts.version, facts.kv_tokens, facts.max_concurrency) == ("0.26.0", 188059, 22.96)
    assert list(facts.measured_inputs().items()) == [
        ("weights_gib", 51.02),
        ("free_before_load_gib", 139.29),
        ("activation_peak_gib", 7.36),
        ("non_torch_gib", 0.22),
        ("available_kv_gib", 27.44),
        ("gpu_total_gib", 139.8),
        ("gpu_memory_utilization", 0.6154),
        ("cudagraph_actual_gib", 0.0),
    ]


def test_predictions_settings_identities_and_terms_are_never_fed_back() -> None:
    facts = LogFacts(version="0.5.17", tp_size=2, kv_tokens=1000, k_cache_gib=1.5, free_after_load_gib=3.0)
    assert facts.measured_inputs() == {}
    assert LogFacts(weights_gib=7.5).measured_inputs() == {"weights_gib": 7.5}


def test_a_name_that_is_no_field_or_a_value_of_another_type_is_refused() -> None:
    with pytest.raises(ValueError, match="no LogFacts field: max_total_num_tokens"):
        LogFacts.from_values({"max_total_num_tokens": 1000})
    with pytest.raises(TypeError, match="wrong type: kv_tokens"):
        LogFacts.from_values({"kv_tokens": 1000.0})
