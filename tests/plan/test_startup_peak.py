"""The measured low point of a start (`plan --from-log LOG --samples DIR`): GPU memory samples
placed on the phases of the engine's log.

The recorded folders are synthetic here: stamped log lines (a short hand-written 0.5.17 start
with MTP, or a real H200 log of tests/data/startup_logs/sglang-h200/ stamped one line a
second), and NVML samples every 50 ms that follow the engine's printed `avail mem` plus a fixed
0.5 GiB gap, with transients of known size and place on top. The analysis must find each.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.engines.sglang.phases import AVAIL_MEM, PHASES
from specpilot.plan.startup_peak import (
    LINES_FILE,
    MEMORY_FILE,
    StampedLine,
    _phase_bounds,
    measure_startup_peak,
)
from specpilot.plan.types import GIB

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"
TOTAL_BYTES = 150 * GIB
NVML_GAP_GIB = 0.5
STEP_S = 0.05
ORIGIN_S = 1_764_547_200.0
PREFIX = "[2026-12-01 00:10:00] "

#: (seconds after the first line, line): a 0.5.17 start with MTP, its avail mem as printed
SHORT_START = (
    (0.0, "server_args=ServerArgs(model_path='m', tp_size=1)"),
    (1.0, "Load weight begin. avail mem=139.00 GB"),
    (
        3.0,
        "Load weight end. elapsed=0.26 s, type=Qwen3_5ForCausalLM, avail mem=88.00 GB, mem usage=51.00 GB.",
    ),
    (3.5, "Load weight begin. avail mem=87.95 GB"),
    (
        4.0,
        "Load weight end. elapsed=0.01 s, type=Qwen3_5ForCausalLMMTP, avail mem=82.45 GB, mem usage=5.50 GB.",
    ),
    (5.0, "Mamba Cache is allocated. max_mamba_cache_size: 105, conv_state size: 0.29GB"),
    (5.5, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 94422, K size: 2.88 GB, V size: 2.88 GB"),
    (6.0, "Memory pool end. avail mem=6.00 GB"),
    (6.5, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 94422, K size: 0.18 GB, V size: 0.18 GB"),
    (7.0, "Memory pool end. avail mem=5.60 GB"),
    (8.0, "Capture target prefill CUDA graph begin. backend=breakable, avail mem=10.30 GB"),
    (30.0, "Capture target prefill CUDA graph end. elapsed=22 s, mem usage=2.90 GB, avail mem=7.40 GB."),
    (30.5, "Capture target verify CUDA graph begin. backend=full, avail mem=7.40 GB"),
    (35.0, "Capture target verify CUDA graph end. elapsed=4 s, mem usage=0.40 GB, avail mem=7.00 GB."),
    (35.5, "Capture draft decode CUDA graph begin. backend=full, avail mem=7.00 GB"),
    (37.0, "Capture draft decode CUDA graph end. elapsed=1 s, mem usage=0.25 GB, avail mem=6.75 GB."),
    (37.5, "Capture draft extend CUDA graph begin. backend=full, avail mem=6.75 GB"),
    (38.0, "Capture draft extend CUDA graph end. elapsed=1 s, mem usage=0.30 GB, avail mem=6.45 GB."),
    (39.0, "max_total_num_tokens=94422, chunked_prefill_size=8192, max_running_requests=21"),
    (45.0, "The server is fired up and ready to roll!"),
    (50.0, "Decode batch, #running-req: 21, #token: 9000"),
)
#: (from s, to s, GiB taken beyond what the engine printed)
SHORT_TRANSIENTS = ((20.0, 21.0, 1.5), (41.0, 42.0, 2.0), (47.0, 48.0, 5.0))


def _free_engine_gib(lines: list[tuple[float, str]], at_s: float, before_gib: float) -> float:
    free = before_gib
    for stamp, text in lines:
        if stamp <= at_s + 1e-9 and (found := AVAIL_MEM.search(text)):
            free = float(found["value"])
    return free


def record(
    folder: Path,
    lines: list[tuple[float, str]],
    transients: tuple[tuple[float, float, float], ...],
    *,
    samples_from_s: float = -2.0,
    samples_to_s: float | None = None,
) -> Path:
    """A start folder as the sampler writes it: memory.tsv and lines.tsv under samples/."""
    samples = folder / "samples"
    samples.mkdir(parents=True, exist_ok=True)
    with (samples / LINES_FILE).open("w") as out:
        for stamp, text in lines:
            out.write(f"{ORIGIN_S + stamp:.3f}\t{text}\n")
    end_s = samples_to_s if samples_to_s is not None else lines[-1][0] + 2.0
    first_free = next(float(found["value"]) for _, text in lines if (found := AVAIL_MEM.search(text)))
    with (samples / MEMORY_FILE).open("w") as out:
        out.write(f"# total_bytes {TOTAL_BYTES}\n")
        for k in range(round((end_s - samples_from_s) / STEP_S) + 1):
            at_s = round(samples_from_s + k * STEP_S, 3)
            free = _free_engine_gib(lines, at_s, first_free) + NVML_GAP_GIB
            free -= sum(extra for start, end, extra in transients if start <= at_s < end)
            out.write(f"{ORIGIN_S + at_s:.3f}\t{int(TOTAL_BYTES - free * GIB)}\n")
    return samples


def _short(tmp_path: Path) -> tuple[Path, str]:
    lines = [(at_s, PREFIX + text) for at_s, text in SHORT_START]
    return record(tmp_path, lines, SHORT_TRANSIENTS), "\n".join(text for _, text in lines)


def test_the_lowest_point_of_the_start_and_its_phase(tmp_path: Path) -> None:
    samples, log_text = _short(tmp_path)
    peak = measure_startup_peak(samples, log_text, PHASES)
    # the warm-up request's 2.0 GiB on the 6.45 GiB left after the last graph, plus NVML's gap
    assert peak.ready
    assert peak.lowest_free_gib == pytest.approx(6.45 + NVML_GAP_GIB - 2.0)
    assert peak.lowest_at_s - peak.origin_s == pytest.approx(41.0)
    assert peak.phase == "warm-up request"
    assert peak.after_line.endswith("max_running_requests=21")
    assert peak.nvml_minus_engine_gib == pytest.approx(NVML_GAP_GIB)
    assert peak.sample_interval_s == pytest.approx(STEP_S)


def test_every_phase_with_its_own_low_point(tmp_path: Path) -> None:
    samples, log_text = _short(tmp_path)
    phases = {p.name: p for p in measure_startup_peak(samples, log_text, PHASES).phases}
    assert list(phases) == [
        "startup",
        "weights",
        "after weights",
        "draft weights",
        "pools",
        "draft pools",
        "after pools",
        "graph: target prefill",
        "after graph: target prefill",
        "graph: target verify",
        "after graph: target verify",
        "graph: draft decode",
        "after graph: draft decode",
        "graph: draft extend",
        "warm-up request",
        "serving",
    ]
    prefill = phases["graph: target prefill"]
    # it began with the draft's own embedding and LM head freed (10.30 printed) and fell 1.5
    assert prefill.free_at_start_gib == pytest.approx(10.30 + NVML_GAP_GIB)
    assert prefill.drop_gib == pytest.approx(1.5)
    assert prefill.lowest_at_s - ORIGIN_S == pytest.approx(20.0)
    # serving went lower than the start (5 GiB for a batch): not the start's low point
    assert phases["serving"].lowest_free_gib == pytest.approx(6.45 + NVML_GAP_GIB - 5.0)
    assert phases["graph: draft extend"].drop_gib == pytest.approx(0.0)


def test_a_start_that_never_became_ready_has_its_low_point_where_it_stopped(tmp_path: Path) -> None:
    lines = [(at_s, PREFIX + text) for at_s, text in SHORT_START[:11]]
    lines.append((9.0, PREFIX + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
    samples = record(tmp_path, lines, ((8.5, 9.0, 10.7),))
    peak = measure_startup_peak(samples, "\n".join(text for _, text in lines), PHASES)
    assert not peak.ready
    assert peak.phase == "graph: target prefill"
    assert peak.lowest_free_gib == pytest.approx(10.30 + NVML_GAP_GIB - 10.7)


def _stamped(log: Path) -> list[StampedLine]:
    """A real log's engine lines, one a second."""
    texts = [row for row in log.read_text().splitlines() if row.startswith("[")]
    return [StampedLine(ORIGIN_S + i, text) for i, text in enumerate(texts)]


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (
            "r13-mtp-rec2-96",  # 0.5.13.post1: the draft loads after the target's graphs
            [
                "startup",
                "weights",
                "pools",
                "after pools",
                "graph: decode",
                "after graph: decode",
                "draft weights",
                "draft pools",
                "after pools",
                "graph: draft",
                "after graph: draft",
                "graph: draft extend",
                "warm-up request",
                "serving",
            ],
        ),
        (
            "r17-plain-rec2-80",  # 0.5.17 without a draft: prefill graphs first
            [
                "startup",
                "weights",
                "pools",
                "after pools",
                "graph: target prefill",
                "after graph: target prefill",
                "graph: target decode",
                "warm-up request",
                "serving",
            ],
        ),
    ],
)
def test_the_phases_of_real_logs(run: str, expected: list[str]) -> None:
    """The markers match what real 0.5.13.post1 and 0.5.17 starts printed on the H200."""
    assert [name for name, _, _ in _phase_bounds(_stamped(H200 / f"{run}.log"), PHASES)] == expected


def _real_start(tmp_path: Path, run: str) -> Path:
    """A real H200 log stamped a line a second, sampled with a 5 GiB dip in the middle of its
    prefill graph capture."""
    stamped = _stamped(H200 / f"{run}.log")
    lines = [(line.at_s - ORIGIN_S, line.text) for line in stamped]
    begin = next(at_s for at_s, text in lines if "Capture target prefill CUDA graph begin" in text)
    return record(tmp_path, lines, ((begin + 0.4, begin + 0.6, 5.0),))


def test_plan_prints_the_measured_low_point_next_to_its_margin(tmp_path: Path) -> None:
    run = "r17-mtp-rec2-96"
    samples = _real_start(tmp_path, run)
    argv = ["plan", str(H200 / f"{run}.toml"), "--from-log", str(H200 / f"{run}.log"), "--samples"]
    as_json = CliRunner().invoke(cli, [*argv, str(samples), "--json"])
    assert as_json.exit_code == 0, as_json.output
    peak = json.loads(as_json.output)["startup_peak"]
    # the capture began at the printed 9.09 GiB (the draft's own embedding and LM head freed):
    # the dip takes it below the 4.46 GiB the pools left, the low point until then
    assert peak["phase"] == "graph: target prefill"
    assert peak["lowest_free_gib"] == pytest.approx(9.09 + NVML_GAP_GIB - 5.0, abs=1e-3)
    assert peak["nvml_minus_engine_gib"] == pytest.approx(NVML_GAP_GIB)
    prefill = next(p for p in peak["phases"] if p["name"] == "graph: target prefill")
    assert prefill["drop_gib"] == pytest.approx(5.0, abs=1e-3)
    as_text = CliRunner().invoke(cli, [*argv, str(tmp_path)])  # the start folder works too
    assert as_text.exit_code == 0, as_text.output
    assert re.search(
        r"lowest free memory of the start: 4\.59 GiB \(4\.09 GiB as the engine counts it\)", as_text.output
    )
    kept = json.loads(as_json.output)["details"]["margin_gib"]
    assert f"in graph: target prefill; the plan keeps {kept:.2f} GiB free" in " ".join(as_text.output.split())


RUN = "r17-mtp-rec2-96"


def _plan_argv(samples: Path | str, log: Path = H200 / f"{RUN}.log") -> list[str]:
    return ["plan", str(H200 / f"{RUN}.toml"), "--from-log", str(log), "--samples", str(samples)]


def _no_memory_file(tmp: Path) -> list[str]:
    (tmp / "engine.log").write_text((H200 / f"{RUN}.log").read_text())
    return _plan_argv(tmp)  # a start folder with its log and no samples


def _lines_of_another_start(tmp: Path) -> list[str]:
    samples = _real_start(tmp / "other", "r17-plain-rec2-96")
    return _plan_argv(samples)


def _memory_of_another_start(tmp: Path) -> list[str]:
    samples = _real_start(tmp / "this", RUN)
    later = [(at_s + 3600.0, PREFIX + text) for at_s, text in SHORT_START]
    other = record(tmp / "other", later, (), samples_from_s=3598.0)
    (samples / MEMORY_FILE).write_text((other / MEMORY_FILE).read_text())
    return _plan_argv(samples)


def _memory_without_its_total(tmp: Path) -> list[str]:
    samples = _real_start(tmp, RUN)
    rows = (samples / MEMORY_FILE).read_text().splitlines()[1:]
    (samples / MEMORY_FILE).write_text("\n".join(rows) + "\n")
    return _plan_argv(samples)


def _no_stamped_lines(tmp: Path) -> list[str]:
    samples = _real_start(tmp, RUN)
    (samples / LINES_FILE).unlink()
    return _plan_argv(samples)


def _edited_memory(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        samples = _real_start(tmp, RUN)
        rows = (samples / MEMORY_FILE).read_text().splitlines()
        (samples / MEMORY_FILE).write_text("\n".join(edit(rows)) + "\n")
        return _plan_argv(samples)

    return make


def _stamp_at(row: str, stamp: str) -> str:
    return stamp + "\t" + row.partition("\t")[2]


def _lines_with_an_infinite_stamp(tmp: Path) -> list[str]:
    samples = _real_start(tmp, RUN)
    rows = (samples / LINES_FILE).read_text().splitlines()
    rows[3] = _stamp_at(rows[3], "inf")
    (samples / LINES_FILE).write_text("\n".join(rows) + "\n")
    return _plan_argv(samples)


def _corrupt_gzip(tmp: Path) -> list[str]:
    samples = _real_start(tmp, RUN)
    packed = bytearray(gzip.compress((samples / MEMORY_FILE).read_bytes()))
    packed[len(packed) // 2 : len(packed) // 2 + 8] = b"\xff" * 8  # the deflate stream, not its header
    (samples / f"{MEMORY_FILE}.gz").write_bytes(bytes(packed))
    (samples / MEMORY_FILE).unlink()
    return _plan_argv(samples)


BAD_INPUT = (
    ("a NaN sample time", _edited_memory(lambda rows: [rows[0], _stamp_at(rows[1], "nan"), *rows[2:]]),
     ("--samples", "memory.tsv:2", "epoch_seconds")),
    ("an infinite stamped line", _lines_with_an_infinite_stamp, ("--samples", "lines.tsv:4", "epoch seconds")),
    ("a total of 0 bytes", _edited_memory(lambda rows: ["# total_bytes 0", *rows[1:]]),
     ("--samples", "memory.tsv:1", "total is 0 bytes")),
    ("a Unicode digit total", _edited_memory(lambda rows: ["# total_bytes ²", *rows[1:]]),
     ("--samples", "memory.tsv:1", "# total_bytes N")),
    ("a corrupt gzip", _corrupt_gzip, ("--samples", "cannot read", "memory.tsv.gz")),
    ("samples without --from-log", lambda t: ["plan", str(H200 / f"{RUN}.toml"), "--samples", str(t)],
     ("--samples", "engine log of the same start", "--from-log")),
    ("a recorded log without samples", _no_memory_file, ("--samples", "holds no memory.tsv", "not recorded")),
    ("stamped lines of another start", _lines_of_another_start, ("--samples", "lines.tsv is from another start")),
    ("memory samples of another start", _memory_of_another_start,
     ("--samples", "memory.tsv is from another start", "do not cover")),
    ("memory.tsv without its total", _memory_without_its_total, ("--samples", "memory.tsv:1", "# total_bytes N")),
    ("samples without stamped lines", _no_stamped_lines, ("--samples", "lines.tsv", "no phases")),
)  # fmt: skip


@pytest.mark.parametrize(("name", "argv", "expect"), BAD_INPUT, ids=[case[0] for case in BAD_INPUT])
def test_bad_samples_are_one_line_exit_2(
    name: str, argv: Callable[[Path], list[str]], expect: tuple[str, ...], tmp_path: Path
) -> None:
    result = CliRunner().invoke(cli, argv(tmp_path))
    output = result.output.strip()
    assert result.exit_code == 2, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    for word in expect:
        assert word in errors[0], output
