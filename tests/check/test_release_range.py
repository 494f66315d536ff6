"""A release newer than the newest verified flag table is a warning; one outside the range, an error."""

from __future__ import annotations

import pytest

from specpilot.check import check_args
from specpilot.engines.registry import release_tables
from specpilot.errors import UserError

ARGV = {"sglang": ["--model-path", "m"], "vllm": ["--model", "m"]}


@pytest.mark.parametrize(
    ("engine", "version"), [("sglang", "0.5.24"), ("sglang", "0.5.30"), ("vllm", "0.35.0")]
)
def test_newer_than_the_verified_tables_warns_with_a_pin(engine: str, version: str) -> None:
    result = check_args(engine, version, ARGV[engine])
    newest = str(release_tables(engine)[-1].version)
    finding = next(f for f in result.findings if f.rule == "release-unverified")
    assert finding.severity == "warning"
    assert newest in finding.message
    assert finding.fix is not None and f'version = "{newest}"' in str(finding.fix.text)
    assert result.ok  # a warning, the launch is still checked with the newest table


@pytest.mark.parametrize(
    ("engine", "version"),
    [
        ("sglang", "0.5.23"),
        ("sglang", "0.5.23.post1"),
        ("sglang", "0.5.13"),
        ("vllm", "0.32.0"),
        ("vllm", "0.33.0"),
        ("vllm", "0.26.0"),
    ],
)
def test_verified_releases_do_not_warn(engine: str, version: str) -> None:
    rules = {f.rule for f in check_args(engine, version, ARGV[engine]).findings}
    assert "release-unverified" not in rules


@pytest.mark.parametrize(
    ("engine", "version"),
    [("sglang", "0.4.9"), ("sglang", "0.6.0"), ("sglang", "1.0.0"), ("vllm", "0.20.0"), ("vllm", "0.40.0")],
)
def test_outside_the_supported_range_is_a_user_error(engine: str, version: str) -> None:
    with pytest.raises(UserError) as raised:
        check_args(engine, version, ARGV[engine])
    assert raised.value.field == "[engine] version"
    assert raised.value.fix and "newest verified" in raised.value.fix


@pytest.mark.parametrize(
    ("engine", "version", "older", "newer"),
    [("sglang", "0.5.20", "0.5.19", "0.5.23"), ("sglang", "0.5.16", "0.5.14", "0.5.19")],
)
def test_a_release_between_two_tables_says_which_table_checks_it(
    engine: str, version: str, older: str, newer: str
) -> None:
    result = check_args(engine, version, ARGV[engine])
    finding = next(f for f in result.findings if f.rule == "release-between-tables")
    assert finding.severity == "warning" and f"checked with {older}'s" in finding.message
    assert finding.fix is not None and f'"{older}" or "{newer}"' in str(finding.fix.text)
    assert result.ok


@pytest.mark.parametrize(
    ("engine", "version"), [("sglang", "0.5.13"), ("sglang", "0.5.23"), ("vllm", "0.33.0")]
)
def test_a_release_with_its_own_table_gets_no_between_warning(engine: str, version: str) -> None:
    assert "release-between-tables" not in {
        f.rule for f in check_args(engine, version, ARGV[engine]).findings
    }
