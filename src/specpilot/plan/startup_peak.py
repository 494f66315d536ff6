"""The measured low point of a start: GPU memory samples placed on the engine's log phases.

A start recorded with a memory sampler (`gpu/sglang/job.py` writes one folder per start) holds

- `memory.tsv`: `# total_bytes N`, then `epoch_seconds<TAB>gpu_used_bytes` (NVML, every 20 ms);
- `lines.tsv`: `epoch_seconds<TAB>engine log line`, stamped as each line landed.

The engine never prints its lowest free memory; the samples do. Each sample falls in the phase
the log was in at that moment (the engine adapter's `startup_phases`, SGLang's in
`engines/sglang/phases.py`: weights, draft weights, pools, each CUDA-graph family, the
warm-up request, serving), so the low point has a cause, and each
phase's drop below the free memory it started with is the size of its transient. Free memory
here is NVML's (total - used) on the whole device: another process's memory (a card emulated
by a blocker) counts as used, as it does for the engine. `nvml_minus_engine_gib` is the median
gap between that and the engine's own `avail mem=` lines, stamped at the same moments.
"""

from __future__ import annotations

import gzip
import itertools
import math
import statistics
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specpilot.engines.phases import StartupPhases
from specpilot.errors import UserError
from specpilot.plan.types import GIB

FIELD = "--samples"
MEMORY_FILE = "memory.tsv"
LINES_FILE = "lines.tsv"
TOTAL_HEADER = "# total_bytes"
#: the first phase: the process up to its first weight (CUDA context, server args)
STARTUP = "startup"
SERVING = "serving"
WARM_UP = "warm-up request"
#: samples of a start must begin by its first log line and run to its last startup line
#: (the sampler starts before the engine and stops after it); slack for clock steps
COVER_SLACK_S = 2.0
GIB_DECIMALS = 3
#: the head of the log line before the low point says what it was (graph lines run long)
AFTER_LINE_CHARS = 200


@dataclass(frozen=True)
class Sample:
    at_s: float
    used_bytes: int


@dataclass(frozen=True)
class StampedLine:
    at_s: float
    text: str


@dataclass(frozen=True)
class Phase:
    """One stretch of the start between two marker lines, with its samples' free memory (at its
    first sample, its lowest, its last)."""

    name: str
    start_s: float
    end_s: float
    free_at_start_gib: float
    lowest_free_gib: float
    lowest_at_s: float
    free_at_end_gib: float

    @property
    def drop_gib(self) -> float:
        """How far free memory fell below where the phase began: its transient at the low point."""
        return self.free_at_start_gib - self.lowest_free_gib

    def to_json(self, origin_s: float) -> dict[str, Any]:
        found = asdict(self)
        for key in ("start_s", "end_s", "lowest_at_s"):
            found[key] = round(found[key] - origin_s, 2)
        for key in ("free_at_start_gib", "lowest_free_gib", "free_at_end_gib"):
            found[key] = round(found[key], GIB_DECIMALS)
        found["drop_gib"] = round(self.drop_gib, GIB_DECIMALS)
        return found


@dataclass(frozen=True)
class StartupPeak:
    """The lowest free memory of a start, when it happened and in which phase."""

    total_gib: float
    #: the first stamped log line: every time below is seconds after it
    origin_s: float
    #: up to the ready line (the whole record when the start never became ready)
    lowest_free_gib: float
    lowest_at_s: float
    phase: str
    #: the head of the last log line before the low point
    after_line: str
    ready: bool
    phases: tuple[Phase, ...]
    nvml_minus_engine_gib: float | None
    sample_interval_s: float
    largest_gap_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "total_gib": round(self.total_gib, GIB_DECIMALS),
            "lowest_free_gib": round(self.lowest_free_gib, GIB_DECIMALS),
            "lowest_at_s": round(self.lowest_at_s - self.origin_s, 2),
            "phase": self.phase,
            "after_line": self.after_line,
            "ready": self.ready,
            "nvml_minus_engine_gib": (
                None
                if self.nvml_minus_engine_gib is None
                else round(self.nvml_minus_engine_gib, GIB_DECIMALS)
            ),
            "sample_interval_s": round(self.sample_interval_s, 4),
            "largest_gap_s": round(self.largest_gap_s, 3),
            "phases": [p.to_json(self.origin_s) for p in self.phases],
        }


def _bad(path: Path, line_number: int, why: str, fix: str) -> UserError:
    return UserError(f"{path}:{line_number}: {why}", field=FIELD, fix=fix)


def read_memory(path: Path) -> tuple[int, list[Sample]]:
    """(device total bytes, samples in time order) from a memory.tsv."""
    rows = _memory_rows(path)
    total = _total_bytes(path, rows)
    samples = [
        _sample(path, number, row, total) for number, row in enumerate(rows[1:], start=2) if row.strip()
    ]
    if not samples:
        raise _bad(path, 2, "holds no samples", "record the start under the memory sampler")
    samples.sort(key=lambda s: s.at_s)
    return total, samples


def _memory_rows(path: Path) -> list[str]:
    """The lines of a memory.tsv, kept plain or gzipped."""
    try:
        raw = path.read_bytes()
        return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8", "replace").splitlines()
    except (OSError, gzip.BadGzipFile, EOFError, zlib.error) as err:  # zlib: a corrupt stream
        raise UserError(
            f"cannot read {path} ({getattr(err, 'strerror', None) or err})",
            field=FIELD,
            fix=f"give the folder a memory sampler wrote during the start ({MEMORY_FILE} and {LINES_FILE})",
        ) from None


def _total_bytes(path: Path, rows: list[str]) -> int:
    """The device's total from the header line `TOTAL_HEADER N`."""
    header = rows[0].split() if rows else []
    if header[:2] != TOTAL_HEADER.split() or len(header) != 3 or not _whole(header[2]):
        raise _bad(
            path, 1, f"the first line is not '{TOTAL_HEADER} N'", "give a memory.tsv the sampler wrote"
        )
    total = int(header[2])
    if total <= 0:
        raise _bad(path, 1, f"the device's total is {total} bytes", "give a memory.tsv the sampler wrote")
    return total


def _sample(path: Path, number: int, row: str, total: int) -> Sample:
    """One `epoch_seconds<TAB>used_bytes` line, at most the device's total."""
    stamp, _, used = row.partition("\t")
    at_s = _seconds(stamp)
    if at_s is None or not _whole(used.strip()):
        raise _bad(
            path, number, f"{row[:60]!r} is not 'epoch_seconds<TAB>used_bytes'", "give the sampler's file"
        )
    if int(used) > total:
        raise _bad(
            path,
            number,
            f"{int(used)} bytes used is more than the device's {total}",
            "give the sampler's file",
        )
    return Sample(at_s, int(used))


def _whole(text: str) -> bool:
    """ASCII digits only (`"²".isdigit()` is true, and int() refuses it)."""
    return text.isascii() and text.isdigit()


def _seconds(text: str) -> float | None:
    """Epoch seconds: a finite number (float() also takes "nan" and "inf")."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def read_lines(path: Path) -> list[StampedLine]:
    """The stamped engine log lines of a lines.tsv, in the order they landed."""
    try:
        rows = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise UserError(
            f"cannot read {path} ({err.strerror}): without stamped log lines the samples have no phases",
            field=FIELD,
            fix=f"give the folder that holds both {MEMORY_FILE} and {LINES_FILE} of the start",
        ) from None
    found: list[StampedLine] = []
    for number, row in enumerate(rows, start=1):
        stamp, tab, text = row.partition("\t")
        at_s = _seconds(stamp)
        if at_s is None:
            if not tab:  # a log line with a newline inside continues the previous one
                continue
            raise _bad(path, number, f"{stamp[:40]!r} is not epoch seconds", "give the stamper's file")
        found.append(StampedLine(at_s, text))
    if not found:
        raise _bad(path, 1, "holds no stamped log lines", "record the start under the log stamper")
    return found


def samples_folder(path: str | Path) -> tuple[Path, Path]:
    """(memory.tsv, lines.tsv) from a folder holding both, or from the path of its memory.tsv."""
    given = Path(path)
    if not given.is_dir():
        memory, folder = given, given.parent
    else:
        # the folder itself, else a start folder's samples/; either kept compressed with the logs
        names = (MEMORY_FILE, f"{MEMORY_FILE}.gz")
        candidates = [f / name for f in (given, given / "samples") for name in names]
        memory = next((c for c in candidates if c.exists()), given / MEMORY_FILE)
        folder = memory.parent
    if not memory.exists():
        raise UserError(
            f"{given} holds no {MEMORY_FILE}: this start was not recorded with samples",
            field=FIELD,
            fix=f"give the folder the sampler wrote ({MEMORY_FILE} and {LINES_FILE}), or drop --samples",
        )
    return memory, folder / LINES_FILE


def refuse_other_start(log_text: str, lines: list[StampedLine], lines_path: Path) -> None:
    """The stamped lines must be this log's: its first weight-load line is among them."""
    stamped = {line.text.strip() for line in lines}
    anchors = [row.strip() for row in log_text.splitlines() if "Load weight begin" in row]
    if not anchors:
        raise UserError(
            "the log has no 'Load weight begin' line to place the samples on",
            field=FIELD,
            fix="give --from-log the whole engine log of the recorded start",
        )
    if anchors[0] not in stamped:
        raise UserError(
            f"{lines_path} is from another start: the log's first 'Load weight begin' line "
            f"({anchors[0][:80]}) is not among its stamped lines",
            field=FIELD,
            fix="give the samples folder recorded with this log",
        )


def _phase_bounds(lines: list[StampedLine], phases: StartupPhases) -> list[tuple[str, float, float]]:
    """(name, start, end) of every stretch between marker lines, in order: the first opens with
    the process (samples before the first log line included), the last runs to the end."""
    markers = [(line.at_s, found) for line in lines if (found := phases.match_marker(line.text))]
    if not markers:
        return [(STARTUP, float("-inf"), float("inf"))]
    seen: dict[str, int] = {}
    bounds = [(STARTUP, float("-inf"), markers[0][0])]
    for (opened_at, opened), (closed_at, closed) in itertools.pairwise(markers):
        bounds.append((_stretch_name(opened, closed, seen), opened_at, closed_at))
    bounds.append((_stretch_name(markers[-1][1], None, seen), markers[-1][0], float("inf")))
    return bounds


def _stretch_name(opened: tuple[str, str], closed: tuple[str, str] | None, seen: dict[str, int]) -> str:
    """What runs between two markers: the phase a begin line opened, the pools a pool end
    closes, the warm-up before ready, serving after it, else 'after' the last phase."""
    (open_kind, open_phase), (close_kind, close_phase) = opened, closed or ("", "")
    if open_kind == "begin":
        return _nth(open_phase, seen)
    if close_kind == "pools_end":
        return _nth(close_phase, seen)
    if open_kind == "ready":
        return SERVING
    if close_kind == "ready":
        return WARM_UP
    return f"after {open_phase}"


def _nth(phase: str, seen: dict[str, int]) -> str:
    """The second weights and pools of a start are the draft model's."""
    seen[phase] = seen.get(phase, 0) + 1
    return phase if seen[phase] == 1 else f"draft {phase}"


def _free_gib(total: int, sample: Sample) -> float:
    return (total - sample.used_bytes) / GIB


def _nearest(samples: list[Sample], at_s: float) -> Sample:
    return min(samples, key=lambda s: abs(s.at_s - at_s))


def _engine_offset(
    total: int, samples: list[Sample], lines: list[StampedLine], phases: StartupPhases
) -> float | None:
    gaps = [
        _free_gib(total, _nearest(samples, line.at_s)) - float(found["value"])
        for line in lines
        if (found := phases.free_memory.search(line.text))
    ]
    return statistics.median(gaps) if gaps else None


def startup_peak(
    total: int, samples: list[Sample], lines: list[StampedLine], memory_path: Path, markers: StartupPhases
) -> StartupPeak:
    """The low point up to the ready line, the phases with their own low points."""
    ready_at = _ready_at(lines, markers)
    startup_end = ready_at if ready_at is not None else lines[-1].at_s
    _refuse_other_samples(samples, lines, startup_end, memory_path)
    phases = _phases(total, samples, lines, markers)
    in_startup = [s for s in samples if s.at_s <= startup_end + COVER_SLACK_S / 2]
    low = max(in_startup, key=lambda s: s.used_bytes)
    steps = [b.at_s - a.at_s for a, b in itertools.pairwise(samples)]
    return StartupPeak(
        total_gib=total / GIB,
        origin_s=lines[0].at_s,
        lowest_free_gib=_free_gib(total, low),
        lowest_at_s=low.at_s,
        phase=next((p.name for p in phases if p.start_s <= low.at_s <= p.end_s), STARTUP),
        after_line=_last_line_by(lines, low.at_s)[:AFTER_LINE_CHARS],
        ready=ready_at is not None,
        phases=tuple(phases),
        nvml_minus_engine_gib=_engine_offset(total, samples, lines, markers),
        sample_interval_s=statistics.median(steps) if steps else 0.0,
        largest_gap_s=max(steps, default=0.0),
    )


def _ready_at(lines: list[StampedLine], markers: StartupPhases) -> float | None:
    """When the ready line landed (None: the start never got ready)."""
    is_ready = ("ready", "ready")
    return next((line.at_s for line in lines if markers.match_marker(line.text) == is_ready), None)


def _last_line_by(lines: list[StampedLine], at_s: float) -> str:
    """The last non-blank log line stamped at or before `at_s` ("" when none)."""
    before = [line.text for line in lines if line.at_s <= at_s and line.text.strip()]
    return before[-1] if before else ""


def _refuse_other_samples(
    samples: list[Sample], lines: list[StampedLine], startup_end: float, memory_path: Path
) -> None:
    """The samples must cover the stamped log, from its first line to the end of the start."""
    if samples[0].at_s > lines[0].at_s + COVER_SLACK_S or samples[-1].at_s < startup_end - COVER_SLACK_S:
        raise UserError(
            f"{memory_path} is from another start: its samples "
            f"({samples[0].at_s:.0f}-{samples[-1].at_s:.0f} s) do not cover the stamped log "
            f"({lines[0].at_s:.0f}-{startup_end:.0f} s)",
            field=FIELD,
            fix="give the memory.tsv recorded with these log lines",
        )


def _phases(
    total: int, samples: list[Sample], lines: list[StampedLine], markers: StartupPhases
) -> list[Phase]:
    """Every stretch between marker lines that holds samples, with its own low point."""
    phases: list[Phase] = []
    for name, start, end in _phase_bounds(lines, markers):
        inside = [s for s in samples if start <= s.at_s < end]
        if not inside:
            continue
        low = max(inside, key=lambda s: s.used_bytes)
        phases.append(
            Phase(
                name,
                max(start, inside[0].at_s),  # the first and last stretches are open-ended
                min(end, inside[-1].at_s),
                _free_gib(total, inside[0]),
                _free_gib(total, low),
                low.at_s,
                _free_gib(total, inside[-1]),
            )
        )
    return phases


def measure_startup_peak(samples_path: str | Path, log_text: str, markers: StartupPhases) -> StartupPeak:
    """`plan --from-log LOG --samples DIR`: the start's low point, refusing samples of another start;
    `markers`: the engine's phase lines (its adapter's `startup_phases`)."""
    memory_path, lines_path = samples_folder(samples_path)
    lines = read_lines(lines_path)
    refuse_other_start(log_text, lines, lines_path)
    total, samples = read_memory(memory_path)
    return startup_peak(total, samples, lines, memory_path, markers)
