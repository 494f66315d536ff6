"""Resuming the incident's job size: 902,087 rows, 60% done (printed, not asserted).

Builds an input JSONL of 902,087 short prompts, lists it into a ledger (the first run's
cost), writes 60% of the rows as finished parts through the real writer and ledger,
then times a resume the way `specpilot generate` does it: open the ledger, check the
input, reconcile the parts, requeue, and stream pending rows until the first request
reaches a local zero-latency server. Also prints the ledger's size on disk and the
CLI's import time. Usage: `python bench/resume_scale.py [--rows N] [--keep DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from generate_overhead import _free_port, _serve
from specpilot.generate.endpoints import Endpoint
from specpilot.generate.job import Job, JobConfig
from specpilot.generate.writer import DATA_DIR, PartWriter

INCIDENT_ROWS = 902_087
DONE_FRACTION = 0.6


def _write_input(path: Path, rows: int) -> None:
    with path.open("w") as out:
        for i in range(rows):
            out.write(
                json.dumps(
                    {
                        "id": f"row-{i:07d}",
                        "conversations": [
                            {"role": "user", "content": f"Explain step {i} of the proof in detail."}
                        ],
                    }
                )
                + "\n"
            )


def _finish_rows(job: Job, done: int) -> None:
    """Mark the first `done` rows finished, with real part files behind them."""
    ledger = job.ledger
    writer = PartWriter(job.config.output_dir / DATA_DIR, ledger.part_commits(), rows_per_part=100_000)
    answer = {"role": "assistant", "content": "x" * 200, "reasoning_content": "y" * 400}
    for start in range(0, done, 20_000):
        for i in range(start, min(start + 20_000, done)):
            row = {
                "id": f"row-{i:07d}",
                "conversations": [{"role": "user", "content": "p"}, answer],
                "meta": {"model": "m", "thinking": True, "completion_tokens": 150},
            }
            writer.add(row, i, 20, 150, 0, time.time())
        ledger.apply(writer.flush())
    writer.close()


def _disk_mib(directory: Path, pattern: str) -> float:
    return sum(p.stat().st_size for p in directory.glob(pattern)) / 2**20


async def _first_request_s(job: Job, started: float) -> float:
    from specpilot.generate.client import Sampling, open_session

    async with open_session(8) as session:
        dispatcher = job.dispatcher(session, Sampling("m", True))
        dispatcher.view = None
        first: list[float] = []
        original = dispatcher.client.complete

        async def spy(base_url: str, messages: object) -> object:
            if not first:
                first.append(time.perf_counter() - started)
                dispatcher.stopping.reason = "benchmark: first request sent"
            return await original(base_url, messages)  # type: ignore[arg-type]

        dispatcher.client.complete = spy  # type: ignore[method-assign, assignment]
        await dispatcher.run()
    return first[0]


def _import_s() -> float:
    """Wall time of a python that imports the generate CLI, minus a bare python."""

    def timed(code: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t

    return timed("import specpilot.cli.generate, specpilot.generate.job") - timed("pass")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=INCIDENT_ROWS)
    parser.add_argument("--keep", type=Path, default=None, help="Work here and keep the files.")
    args = parser.parse_args()
    port = _free_port()
    server = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    work = args.keep or Path(tempfile.mkdtemp(prefix="resume-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        config = JobConfig(
            work / "in.jsonl",
            work / "out",
            [Endpoint(f"http://127.0.0.1:{port}")],
            "m",
            True,
            concurrency=8,
            show_progress=False,
        )
        t = time.perf_counter()
        _write_input(config.input_path, args.rows)
        print(
            f"input: {args.rows} rows, {config.input_path.stat().st_size / 2**20:.0f} MiB "
            f"({time.perf_counter() - t:.1f} s to write)"
        )
        t = time.perf_counter()
        job = Job(config)
        job.prepare("m")
        print(f"first run: listing every row into the ledger: {time.perf_counter() - t:.2f} s")
        t = time.perf_counter()
        done = int(args.rows * DONE_FRACTION)
        _finish_rows(job, done)
        job.close()
        print(f"setup: {done} rows written as done ({time.perf_counter() - t:.1f} s)")

        started = time.perf_counter()
        resumed = Job(config)
        resumed.prepare("m")
        prepared_s = time.perf_counter() - started
        first_s = asyncio.run(_first_request_s(resumed, started))
        resumed.close()
        print(
            f"resume: ledger open + input check + reconcile + requeue: {prepared_s:.2f} s; "
            f"first request sent after {first_s:.2f} s ({len(resumed.pending)} rows pending)"
        )
        out = config.output_dir
        ledger_mib = _disk_mib(out, "ledger.sqlite*")
        print(
            f"ledger on disk: {ledger_mib:.1f} MiB ({ledger_mib * 2**20 / args.rows:.0f} "
            f"bytes/row); parts: {_disk_mib(out / DATA_DIR, '*.jsonl'):.0f} MiB"
        )
        print(f"CLI start-up (python + imports, not counted above): {_import_s():.2f} s")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
