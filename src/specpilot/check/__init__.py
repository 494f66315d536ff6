"""`specpilot check`: the engines' flag rules, version-aware, each with its fix."""

from specpilot.check.engine import check_args
from specpilot.check.spec_check import check_spec, fix_spec
from specpilot.check.types import CheckResult
from specpilot.engines.fix import Fix
from specpilot.engines.rules import Finding, GpuFacts

__all__ = ["CheckResult", "Finding", "Fix", "GpuFacts", "check_args", "check_spec", "fix_spec"]
