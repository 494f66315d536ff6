"""Peak memory of `specpilot export` per format at the real job's size (printed, not asserted).

The job this was built for: 902,087 rows of about 9 KB (1.87 B tokens). The script
builds such a job synthetically (a ledger listing every row, then every row written
as finished, multi-turn with long reasoning, through the real writer and ledger), then
runs `specpilot export --format F` in a fresh process per format and prints each one's
peak RSS, beside the peak of a process that only reads one whole part into memory (what
the exporter did before it streamed). Target: every format under 1 GiB, and the same
peak at any --rows. Usage: `python bench/export_memory.py [--rows N] [--rows-per-part N]
[--keep DIR]`; at full size it needs ~9 GB of disk per copy of the rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specpilot.export.formats import FORMATS
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import Job, JobConfig
from specpilot.generate.sampling import Sampling
from specpilot.generate.writers.parts import DATA_DIR, PartWriter

JOB_ROWS = 902_087
ROWS_PER_PART = 100_000
# one process: run the CLI, then print its own peak RSS (ru_maxrss is KiB on Linux)
MEASURE = (
    "import resource, sys\n"
    "from specpilot.cli import cli\n"
    "try:\n"
    "    cli.main(sys.argv[1:], prog_name='specpilot')\n"
    "except SystemExit as done:\n"
    "    assert not done.code, done.code\n"
    "print('peak_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
)
WHOLE_PART = (
    "import json, resource, sys\n"
    "rows = [json.loads(line) for line in open(sys.argv[1], 'rb')]\n"
    "print('peak_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
)


def _row(i: int) -> dict[str, object]:
    """A two-turn row of ~9 KB: each target turn ~1 KB of answer and ~3 KB of reasoning."""
    words = f"step {i} of the argument follows from the bound above and the induction hypothesis; "

    def turn(k: int) -> dict[str, str]:
        return {
            "role": "assistant",
            "content": (words * 12)[: 1000 + k],
            "reasoning_content": (words * 36)[: 3000 + k],
        }

    turn_meta = {"index": 1, "finish_reason": "stop", "prompt_tokens": 80, "completion_tokens": 1040}
    return {
        "id": f"row-{i:07d}",
        "conversations": [
            {"role": "system", "content": "You are a careful mathematician."},
            {"role": "user", "content": f"Prove lemma {i} in full. " * 8},
            turn(0),
            {"role": "user", "content": "Now the converse."},
            turn(1),
        ],
        "status": "success",
        "meta": {
            "model": "Qwen/Qwen3.6-27B",
            "thinking": True,
            "keep_given_turns": False,
            "target_turns": [2, 4],
            "finish_reason": "stop",
            "prompt_tokens": 1200,
            "completion_tokens": 2080,
            "flags": [],
            "turns": [turn_meta, {**turn_meta, "index": 4}],
        },
    }


def _build_job(work: Path, rows: int, rows_per_part: int) -> JobConfig:
    config = JobConfig(
        work / "in.jsonl",
        work / "out",
        [Endpoint("http://127.0.0.1:9")],
        "m",
        Sampling(True),
        show_progress=False,
    )
    with config.input_path.open("w") as out:
        for i in range(rows):
            out.write(json.dumps({"id": f"row-{i:07d}", "prompt": f"Prove lemma {i} in full."}) + "\n")
    job = Job(config)
    try:
        job.prepare("Qwen/Qwen3.6-27B")
        writer = PartWriter(config.output_dir / DATA_DIR, job.ledger.part_commits(), rows_per_part)
        for start in range(0, rows, 5_000):
            for i in range(start, min(start + 5_000, rows)):
                writer.add(_row(i), i, 1200, 2080, 0, time.time())
            job.ledger.apply(writer.flush())
        writer.close()
    finally:
        job.close()
    return config


def _peak_mib(argv: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB, wall seconds) of one fresh process."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", *argv], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{argv[1:]} failed: {done.stderr[-2000:]}")
    line = next(line for line in done.stderr.splitlines() if line.startswith("peak_kib"))
    return int(line.split()[1]) / 1024, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=JOB_ROWS)
    parser.add_argument("--rows-per-part", type=int, default=ROWS_PER_PART)
    parser.add_argument("--keep", type=Path, default=None, help="Work here and keep the files.")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="export-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    config = _build_job(work, args.rows, args.rows_per_part)
    parts = sorted((config.output_dir / DATA_DIR).glob("part-*.jsonl"))
    size_bytes = sum(p.stat().st_size for p in parts)
    print(
        f"job: {args.rows} rows of {size_bytes / args.rows / 1024:.1f} KiB in {len(parts)} parts "
        f"({size_bytes / 2**30:.2f} GiB; {time.perf_counter() - started:.0f} s to build)"
    )
    whole, _ = _peak_mib([WHOLE_PART, str(parts[0])])
    print(f"{'reading one whole part (before)':<34} peak {whole:8.0f} MiB")
    for fmt, spec in FORMATS.items():
        target = work / f"export-{fmt}"
        argv = [MEASURE, "export", str(config.output_dir), "--format", fmt, "--to", str(target)]
        if spec.owns is None:  # one file
            argv[-1] = str(target) + ".jsonl"
        peak, wall_s = _peak_mib(argv)
        verdict = "under 1 GiB" if peak < 1024 else "OVER 1 GiB"
        print(f"{'export --format ' + fmt:<34} peak {peak:8.0f} MiB  {wall_s:6.1f} s  {verdict}")


if __name__ == "__main__":
    main()
