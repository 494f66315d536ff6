"""The report scripts under gpu/sglang/ run on the committed data (they are not run on a GPU,
so a change in what they import shows here, not on the next lease)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "sglang"))

import compare
import peaks


def test_compare_prints_each_matrix_start_with_its_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    compare.main("r17-plain-rec")
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| r17-")]
    # rec2-80 and rec2-96 started, rec-96 ran out of memory in its prefill capture: each as planned
    assert [row.split(" | ")[0] for row in rows] == [
        "| r17-plain-rec-96",
        "| r17-plain-rec2-80",
        "| r17-plain-rec2-96",
    ]
    assert all(" ok |" in row for row in rows)


def test_peaks_prints_the_margin_against_the_measured_low_point(capsys: pytest.CaptureFixture[str]) -> None:
    peaks.main()
    out = capsys.readouterr().out
    assert "| sglang-0.5.17-h200-m96-above | 95.6 | 0.99 | no |" in out
    assert "graph: target prefill" in out
