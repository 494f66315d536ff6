"""The steady-state window that gpu/sglang/job.py compares two clients by (gpu/sglang/steady.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "sglang"))

import steady


def _line(stamp: float, running: int, rate: float, accept: str = "") -> str:
    return (
        f"{stamp}\t[2026-12-01 10:00:00] Decode batch, #running-req: {running}, #token: 900, "
        f"token usage: 0.01, {accept}cuda graph: True, gen throughput (token/s): {rate:.2f}, #queue-req: 0"
    )


def test_window_is_the_longest_run_at_nine_tenths_of_the_peak(tmp_path: Path) -> None:
    lines = [
        _line(100.0, 2, 50.0),  # ramp-up
        _line(101.0, 10, 400.0),
        _line(102.0, 10, 500.0, "accept len: 1.50, accept rate: 0.10, "),
        _line(104.0, 9, 600.0, "accept len: 2.50, accept rate: 0.50, "),
        _line(105.0, 3, 100.0),  # the tail
        _line(106.0, 10, 900.0),  # a shorter burst back at the peak
        "106.5\tsome other line",
    ]
    path = tmp_path / "lines.tsv"
    path.write_text("\n".join(lines) + "\n")
    found = steady.window(steady.read_lines(path), 0.0, 200.0)
    assert found["peak_running"] == 10
    assert found["window_lines"] == 3
    assert found["window_s"] == 3.0
    # tokens over seconds: the first line opens the window, the next two cover 1 s and 2 s
    assert found["output_tokens_per_s"] == round((500 * 1 + 600 * 2) / 3, 1)
    assert found["accept_length"] == 2.0


def test_window_outside_the_client_run_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "lines.tsv"
    path.write_text("\n".join(_line(100.0 + i, 8, 300.0) for i in range(5)) + "\n")
    assert steady.window(steady.read_lines(path), 200.0, 300.0) == {"lines": 0}


RUNS = Path(__file__).resolve().parents[1] / "data" / "gpu-runs"
SIDES = ("bench_serving", "specpilot")


def _recorded_windows(folder: str, lines_file: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A recorded saturation pair and each client's steady window recomputed from its lines."""
    pair = json.loads((RUNS / folder / "results.json").read_text())["plain"]["saturation"][0]
    lines = steady.read_lines(RUNS / folder / lines_file)
    return pair, {side: steady.window(lines, pair[side]["start"], pair[side]["end"]) for side in SIDES}


def test_the_recorded_h200_pair_follows_from_its_stamped_lines() -> None:
    """The saturation pair of docs/gpu-validation.md, recomputed from the committed log lines:
    both clients held 64 running and specpilot's steady window is within 4% of bench_serving's."""
    pair, found = _recorded_windows("sglang-0.5.17-h200-saturation", "lines.tsv")
    for side, window in found.items():
        assert window == pair[side]["steady"], side
        assert window["mean_running"] == 64.0
    ratio = found["specpilot"]["output_tokens_per_s"] / found["bench_serving"]["output_tokens_per_s"]
    assert round(ratio, 4) == pair["ratio_steady"] and 0.96 < ratio < 1.04


def test_the_pair_at_the_plans_maximum_follows_from_its_stamped_lines() -> None:
    """At 119 in flight (the plan's maximum on the whole H200) both clients held 118 running
    through their steady windows; specpilot's window decoded 0.94 of bench_serving's, while by each
    client's own count the two runs took 67.9 s and 67.2 s for the same tokens."""
    pair, found = _recorded_windows("sglang-0.5.17-h200-plain", "samples/lines.tsv")
    assert pair["concurrency"] == 119
    data = RUNS / "sglang-0.5.17-h200-plain"
    for side, window in found.items():
        assert window == pair[side]["steady"], side
        assert window["mean_running"] == 118.0
    ratio = found["specpilot"]["output_tokens_per_s"] / found["bench_serving"]["output_tokens_per_s"]
    assert round(ratio, 4) == pair["ratio_steady"] == 0.9419
    own = json.loads((data / "s119.specpilot.out").read_text())
    assert own["completion_tokens"] == pair["specpilot"]["engine_tokens"]
    report = (data / "s119.bench_serving.out").read_text()
    assert "Benchmark duration (s):                  67.21" in report
    assert own["elapsed_s"] == 67.941


def test_decode_rate_leaves_out_the_lines_that_cover_a_prefill(tmp_path: Path) -> None:
    lines = [_line(100.0 + i, 10, 500.0) for i in range(4)]
    lines.append(_line(110.0, 10, 50.0))  # 6 s since the last decode line: a prefill ran between
    lines += [_line(111.0 + i, 10, 520.0) for i in range(3)]
    lines.append(_line(114.5, 2, 40.0))  # the tail, below 0.9 x the peak
    path = tmp_path / "lines.tsv"
    path.write_text("\n".join(lines) + "\n")
    rows = steady.read_lines(path)
    assert steady.decode_rate(rows, 0.0, 200.0) == round((500 * 3 + 520 * 3) / 6, 1)
    assert steady.decode_rate(rows, 300.0, 400.0) is None


def test_both_recorded_pairs_decode_within_2_percent() -> None:
    """Left out of both pairs' steady windows: the lines whose interval covers a wave's prefill.
    There specpilot's runs decoded 0.986 (64 in flight) and 0.982 (119) of bench_serving's rate."""
    for folder, lines_file, expected in (
        ("sglang-0.5.17-h200-saturation", "lines.tsv", 0.9856),
        ("sglang-0.5.17-h200-plain", "samples/lines.tsv", 0.9824),
    ):
        pair = json.loads((RUNS / folder / "results.json").read_text())["plain"]["saturation"][0]
        lines = steady.read_lines(RUNS / folder / lines_file)
        rates = [
            steady.decode_rate(lines, pair[s]["start"], pair[s]["end"])
            for s in ("specpilot", "bench_serving")
        ]
        assert rates[0] is not None and rates[1] is not None
        assert round(rates[0] / rates[1], 4) == expected, folder
