"""`specpilot check`: the engines' flag rules, version-aware, each with its fix."""

from specpilot.check.engine import check_args
from specpilot.check.types import CheckFix, CheckResult, Finding, GpuFacts

__all__ = ["CheckFix", "CheckResult", "Finding", "GpuFacts", "check_args"]
