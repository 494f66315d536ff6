"""A plan says which release's arithmetic it used and which real starts it rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.engines.registry import engine_release
from specpilot.plan.provenance import MEASURED, MeasuredRelease, provenance

REPO = Path(__file__).resolve().parents[2]
SGLANG_0517 = MeasuredRelease("sglang", "0.5.17", "H200", 12, "docs/sglang-gpu-validation.md")


def test_the_vllm_h200_matrix_is_registered() -> None:
    basis = provenance(engine_release("vllm", "0.26.0"))
    assert basis.arithmetic == "vLLM 0.2x (0.21-0.29, verified on 0.26.0)"
    assert basis.measured_starts == ("vLLM 0.26.0 on H200, 9 starts, docs/gpu-validation.md",)
    assert basis.release_measured


def test_a_release_in_a_measured_window_is_still_named_unmeasured() -> None:
    basis = provenance(engine_release("vllm", "0.27.0"))
    assert basis.measured_starts and not basis.release_measured
    assert "vLLM 0.27.0 itself is unmeasured" in basis.summary("vLLM", "0.27.0")


def test_the_sglang_h200_matrix_is_registered() -> None:
    basis = provenance(engine_release("sglang", "0.5.17"))
    assert basis.arithmetic == "SGLang 0.5.17"
    assert basis.measured_starts == ("SGLang 0.5.17 on H200, 12 starts, docs/gpu-validation.md",)
    assert basis.release_measured


def test_a_window_without_starts_says_unverified() -> None:
    basis = provenance(engine_release("sglang", "0.5.20"))
    assert basis.arithmetic == "SGLang 0.5.18-0.5.22"
    assert not basis.measured_starts and not basis.release_measured
    assert "unverified on a real GPU" in basis.summary("SGLang", "0.5.20")


@pytest.mark.parametrize(
    ("version", "in_window", "measured"),
    [("0.5.17", True, True), ("0.5.14", False, False), ("0.5.18", False, False)],
)
def test_an_appended_record_counts_inside_its_arithmetic_window_only(
    version: str, in_window: bool, measured: bool
) -> None:
    without = tuple(r for r in MEASURED if r.engine != "sglang")
    basis = provenance(engine_release("sglang", version), (*without, SGLANG_0517))
    assert bool(basis.measured_starts) is in_window
    assert basis.release_measured is measured


def test_a_post_release_measures_its_release() -> None:
    """Post releases fix bugs, not memory arithmetic; the record names the one started."""
    record = MeasuredRelease("sglang", "0.5.13.post1", "H200", 3, "docs/x.md")
    assert provenance(engine_release("sglang", "0.5.13.post1"), (record,)).release_measured
    assert provenance(engine_release("sglang", "0.5.13"), (record,)).release_measured
    assert not provenance(engine_release("sglang", "0.5.12"), (record,)).release_measured


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("gpu/specs/h200-dense-96.toml", "9 starts"),
        ("examples/qwen36-27b-mtp-sglang.toml", "SGLang 0.5.13.post1 on H200, 12 starts"),
        ("examples/qwen3-next-80b-a3b-sglang.toml", "unverified on a real GPU"),
    ],
)
def test_plan_prints_and_reports_its_basis(spec: str, words: str) -> None:
    runner = CliRunner()
    human = runner.invoke(cli, ["plan", str(REPO / spec)])
    assert "rests on: arithmetic of " in human.output and words in human.output
    data = json.loads(runner.invoke(cli, ["plan", str(REPO / spec), "--json"]).output)
    assert set(data["provenance"]) == {"arithmetic", "measured_starts", "release_measured"}
    assert (
        words in " ".join(data["provenance"]["measured_starts"]) or not data["provenance"]["measured_starts"]
    )
