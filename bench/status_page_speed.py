"""How long the status page takes with 100k points of history (and a 100k-row ledger).

    python bench/status_page_speed.py [--points 100000] [--servers 4]

Builds a ledger whose 100k done rows span 28 hours and a live history of 100k one-second
samples per server, serves the page as `generate --serve-status` does, and prints: the
ledger read, the page render, a whole GET / (cold: ledger read included), the page's
size, and, when Chromium is installed, a headless browser's load of the page next to
its load of about:blank (the difference is the page's own cost).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

from specpilot.generate.dispatch.servers import ServerPool
from specpilot.generate.dispatch.stats import LiveStats
from specpilot.generate.ledger.store import DoneRecord, Ledger, LedgerBatch
from specpilot.status.ledger_view import read_snapshot
from specpilot.status.live import LiveRecorder
from specpilot.status.page import PageInput, render_page
from specpilot.status.server import StatusSource, bind, serving, url_of


class _Job:
    """A stand-in for the dispatcher: the three things the page reads."""

    def __init__(self, servers: int) -> None:
        self.stats = LiveStats(total=1_000_000, done_before=0, failed_before=0)
        self.pool = ServerPool([f"http://10.0.0.{i}:30000" for i in range(servers)], 64)
        self.accept = 3.0

    def accept_length(self) -> float | None:
        return self.accept


def _ledger(directory: Path, rows: int, span_s: float) -> None:
    ledger = Ledger.in_dir(directory)
    ledger.initialize(((i, f"row-{i}") for i in range(rows)), lambda: {"model": "bench"})
    start = time.time() - span_s
    done = [DoneRecord(i, 0, 100, 200 + (i * 7919) % 4000, 0, start + span_s * i / rows) for i in range(rows)]
    ledger.apply(LedgerBatch([], [], [], done, []))
    ledger.close()


def _history(job: _Job, recorder: LiveRecorder, points: int) -> None:
    start = time.time() - points
    for i in range(points):
        for index, server in enumerate(job.pool.servers):
            job.stats.answered(server.name, 1.0, 100, 2000 + 100 * index)
        job.accept = 3.0 + math.sin(i / 600)
        recorder.sample(start + i)


async def _get(url: str) -> tuple[float, int]:
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        async with session.get(url) as response:
            body = await response.read()
        return time.perf_counter() - started, len(body)


def _browser_s(chromium: str, url: str, profile: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return time.perf_counter() - started


async def _serve_and_measure(directory: Path, recorder: LiveRecorder, chromium: str | None) -> None:
    sock = bind("127.0.0.1:0", public=False, flag="--addr")
    url = url_of(sock)
    async with serving(sock, StatusSource(directory, recorder)):
        cold_s, size = await _get(url)
        warm_s, _ = await _get(url)
        print(
            f"GET / cold (ledger read + render): {cold_s * 1000:.0f} ms; warm: {warm_s * 1000:.0f} ms; {size / 1024:.0f} KiB"
        )
        if chromium:
            profile = directory / "chromium-profile"
            blank_s = await asyncio.to_thread(_browser_s, chromium, "about:blank", profile)
            page_s = await asyncio.to_thread(_browser_s, chromium, url, profile)
            print(
                f"headless Chromium: about:blank {blank_s * 1000:.0f} ms, the page {page_s * 1000:.0f} ms "
                f"(page's own cost ~{(page_s - blank_s) * 1000:.0f} ms)"
            )
        else:
            print("Chromium not installed: browser load not measured")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--servers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        _ledger(directory, args.points, span_s=28 * 3600)
        job = _Job(args.servers)
        recorder = LiveRecorder(job)
        _history(job, recorder, args.points)
        print(f"{args.points} ledger rows, {args.points} history samples x {args.servers} servers")
        started = time.perf_counter()
        snapshot = read_snapshot(directory)
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        page = render_page(PageInput("bench", snapshot, recorder.view()))
        render_s = time.perf_counter() - started
        print(
            f"ledger read: {read_s * 1000:.0f} ms; page render: {render_s * 1000:.0f} ms ({len(page) / 1024:.0f} KiB)"
        )
        asyncio.run(_serve_and_measure(directory, recorder, shutil.which("chromium")))


if __name__ == "__main__":
    main()
