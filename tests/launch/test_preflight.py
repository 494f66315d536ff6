"""`up` runs check then plan first; a check error refuses before anything is shipped."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specpilot.launch.preflight import run_preflight
from tests.launch.conftest import SpecFactory


@dataclass(frozen=True)
class StubFix:
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StubFinding:
    rule: str
    severity: str
    message: str
    fix: StubFix | None = None


@dataclass
class StubResult:
    findings: list[StubFinding]


def install_check(monkeypatch: pytest.MonkeyPatch, findings: list[StubFinding]) -> None:
    """A stand-in for specpilot.check with the shape of its CheckResult."""
    module = types.ModuleType("specpilot.check")
    module.check_spec = lambda spec: StubResult(findings)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "specpilot.check", module)


def test_check_error_refuses_with_its_fix_and_skips_the_plan(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fix = StubFix(("--mamba-scheduler-strategy", "extra_buffer"), {"SGLANG_ENABLE_SPEC_V2": "1"})
    install_check(
        monkeypatch,
        [
            StubFinding("sglang.spec_radix_no_buffer", "error", "not compatible with radix", fix),
            StubFinding("sglang.max_running_48", "adjusts", "max_running_requests becomes 48"),
        ],
    )
    pre = run_preflight(make_spec("sglang_ready"))
    assert pre.cause == "config"
    assert pre.errors == ["sglang.spec_radix_no_buffer: not compatible with radix"]
    assert pre.warnings == ["sglang.max_running_48: max_running_requests becomes 48"]
    assert pre.fix is not None and pre.fix.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert pre.plan_json is None  # the plan is not made for args the engine would reject


def test_clean_check_then_plan(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_check(monkeypatch, [])
    pre = run_preflight(make_spec("sglang_ready"))
    assert pre.errors == [] and pre.skipped == []
    assert pre.plan_json is not None and pre.plan_json["engine"] == "sglang"
