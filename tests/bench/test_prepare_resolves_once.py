"""bench prepares a variant from one resolution of its spec: the model read once, however many
preflights (as given, at the plan's recommendation, at a running cap) the variant takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.bench.variants import Variant, prepare
from specpilot.check.resolved import release_of
from specpilot.spec import load_spec
from tests.counting import Counted

SPEC = Path(__file__).resolve().parents[2] / "examples" / "qwen36-27b-mtp-sglang-fixed.toml"


@pytest.mark.parametrize("variant", [Variant(), Variant(running_cap=8)], ids=["plain", "capped"])
def test_a_variant_reads_the_model_once(monkeypatch: pytest.MonkeyPatch, variant: Variant) -> None:
    found = Counted(monkeypatch)
    spec = load_spec(SPEC)
    prepared = prepare(spec, release_of(spec), variant, "plain")
    assert prepared.plan is not None, prepared.refused
    assert found.reads == 1
    assert set(found.evaluations.values()) == {1}, found.evaluations
