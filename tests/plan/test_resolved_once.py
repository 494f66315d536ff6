"""One command resolves its spec once: the model is read once and each launch's flags are
evaluated once (`specpilot.check.resolved`), however many steps (check, calibration, plan, the
recommendation's serving bound, --write) read them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.spec import load_spec
from tests.counting import Counted

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Counted]]:
    def run(*argv: str, code: int | None = None) -> Counted:
        found = Counted(monkeypatch)
        result = CliRunner().invoke(cli, list(argv), catch_exceptions=False)
        assert result.exit_code in ((0, 1) if code is None else (code,)), result.output
        return found

    yield run


@pytest.mark.parametrize(
    "spec",
    [
        "examples/qwen36-27b-mtp-sglang.toml",
        "examples/qwen3-8b-vllm.toml",
        "examples/qwen3-30b-a3b-sglang.toml",
    ],
)
def test_plan_reads_the_model_once_and_evaluates_the_spec_once(
    counted: Callable[..., Counted], spec: str
) -> None:
    found = counted("plan", str(REPO / spec), "--json")
    own = tuple(load_spec(REPO / spec).engine.args)
    assert found.reads == 1
    assert found.evaluations[own] == 1
    assert set(found.evaluations.values()) == {1}, found.evaluations  # no launch twice


def test_plan_from_a_log_reads_the_model_once(counted: Callable[..., Counted]) -> None:
    spec = H200 / "r13-plain-rec-96.toml"
    found = counted("plan", str(spec), "--json", "--from-log", str(spec.with_suffix(".log")))
    assert found.reads == 1
    assert found.evaluations[tuple(load_spec(spec).engine.args)] == 1
    assert set(found.evaluations.values()) == {1}, found.evaluations


def test_plan_write_reads_the_model_once(counted: Callable[..., Counted], tmp_path: Path) -> None:
    found = counted(
        "plan", str(REPO / "examples/qwen36-27b-mtp-sglang.toml"), "--write", str(tmp_path / "w.toml")
    )
    assert (tmp_path / "w.toml").exists()
    assert found.reads == 1
    assert set(found.evaluations.values()) == {1}, found.evaluations


def test_check_reads_the_model_once_and_evaluates_once(counted: Callable[..., Counted]) -> None:
    spec = REPO / "examples/qwen36-27b-mtp-sglang.toml"
    found = counted("check", str(spec), "--json")
    assert (found.reads, sum(found.evaluations.values())) == (1, 1)


def test_check_fix_reads_the_model_once(counted: Callable[..., Counted]) -> None:
    spec = REPO / "examples/qwen36-27b-mtp-nobuffer-sglang.toml"
    found = counted("check", str(spec), "--fix", "--json")
    assert found.reads == 1
    assert found.evaluations[tuple(load_spec(spec).engine.args)] == 1
