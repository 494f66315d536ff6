"""Start and resume at the incident's size: time to the first request and peak memory, by rows done.

For each size (100,000 / 300,000 / 902,087 rows by default) it writes an input of short
prompts, times a fresh start (list every row into the ledger, then the first request),
then writes all rows but the last 2,087 as finished ~9 KB rows through the project's own
writer and ledger (as a real job leaves them) and times a resume to its first request.
Each start runs in a child process of its own, so its peak RSS is its own. The first
request is answered in-process (no server): what is timed is specpilot's start alone.
Printed, not asserted; the files are deleted after each size.

Usage: `python bench/resume_scale.py [--sizes 100000,300000,902087] [--keep DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specpilot.generate.dispatch.client import open_session
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import Job, JobConfig
from specpilot.generate.rows.types import Answer
from specpilot.generate.sampling import Sampling
from specpilot.generate.writers.parts import DATA_DIR, PartWriter

INCIDENT_ROWS = 902_087
LEFT_ROWS = 2_087  # the incident's resume: 900,000 done, 2,087 to go
ROW_BYTES = 9_000
BATCH_ROWS = 4_096


def _config(work: Path) -> JobConfig:
    return JobConfig(
        work / "in.jsonl",
        work / "out",
        [Endpoint("http://127.0.0.1:9")],
        "m",
        Sampling(True),
        concurrency=8,
        show_progress=False,
        notify=lambda _: None,
    )


def _write_input(path: Path, rows: int) -> None:
    with path.open("w") as out:
        for start in range(0, rows, BATCH_ROWS):
            out.write(
                "".join(
                    f'{{"id":"row-{i:07d}","conversations":[{{"role":"user","content":"Explain step {i} '
                    'of the proof in detail."}]}\n'
                    for i in range(start, min(start + BATCH_ROWS, rows))
                )
            )


def _finish_rows(work: Path, done: int) -> None:
    """Mark the first `done` rows finished, with real ~9 KB rows in real parts behind them."""
    job = Job(_config(work))
    job.prepare("m")
    ledger = job.ledger
    writer = PartWriter(job.config.output_dir / DATA_DIR, ledger.part_commits(), rows_per_part=100_000)
    reasoning = "y" * (ROW_BYTES - 1_400)
    now = time.time()
    for i in range(done):
        answer = {
            "role": "assistant",
            "content": f"answer {i} " + "x" * 1_000,
            "reasoning_content": reasoning,
        }
        row = {
            "id": f"row-{i:07d}",
            "conversations": [
                {"role": "user", "content": f"Explain step {i} of the proof in detail."},
                answer,
            ],
            "meta": {"model": "m", "thinking": True, "completion_tokens": 2_000},
        }
        writer.add(row, i, 20, 2_000, 0, now)
        if len(writer) >= BATCH_ROWS:
            ledger.apply(writer.flush())
    ledger.apply(writer.flush())
    writer.close()
    job.close()


async def _first_request_s(job: Job, started: float) -> float:
    async with open_session(8) as session:
        dispatcher = job.dispatcher(session, "m")
        first: list[float] = []

        async def answer(base_url: str, messages: object, tools: object = None) -> Answer:
            if not first:
                first.append(time.perf_counter() - started)
                dispatcher.stopping.reason = "benchmark: first request sent"
            return Answer("a", "r", "stop", 1, 1, None)

        dispatcher.client.complete = answer  # type: ignore[method-assign]
        await dispatcher.run()
    return first[0]


def _measure(work: Path) -> None:
    """Child: one start to its first request; prints seconds and peak RSS as JSON."""
    started = time.perf_counter()
    job = Job(_config(work))
    job.prepare("m")
    first_s = asyncio.run(_first_request_s(job, started))
    job.close()
    # VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
    status = Path("/proc/self/status").read_text()
    peak_mib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024
    print(json.dumps({"first_request_s": first_s, "peak_mib": peak_mib}))


def _child(work: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", str(work)], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def _size(work: Path, rows: int) -> tuple[dict[str, float], dict[str, float], float]:
    _write_input(work / "in.jsonl", rows)
    fresh = _child(work)
    shutil.rmtree(work / "out")
    t = time.perf_counter()
    _finish_rows(work, rows - LEFT_ROWS)
    built_s = time.perf_counter() - t
    return fresh, _child(work), built_s


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=f"100000,300000,{INCIDENT_ROWS}")
    parser.add_argument("--keep", type=Path, default=None, help="Work here and keep the last size's files.")
    parser.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        _measure(args.measure)
        return
    print(
        f"{'rows':>9} {'done':>9} {'fresh: first request':>21} {'peak':>9} {'resume: first request':>22} {'peak':>9}"
    )
    for rows in (int(size) for size in args.sizes.split(",")):
        work = args.keep or Path(tempfile.mkdtemp(prefix="resume-scale-"))
        work.mkdir(parents=True, exist_ok=True)
        try:
            fresh, resumed, built_s = _size(work, rows)
            parts_gib = sum(p.stat().st_size for p in (work / "out" / DATA_DIR).glob("*.jsonl")) / 2**30
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)
        print(
            f"{rows:>9,} {rows - LEFT_ROWS:>9,} {fresh['first_request_s']:>19.2f} s {fresh['peak_mib']:>5.0f} MiB "
            f"{resumed['first_request_s']:>20.2f} s {resumed['peak_mib']:>5.0f} MiB"
            f"   ({parts_gib:.1f} GiB of parts, built in {built_s:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
