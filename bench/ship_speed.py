"""Time verified put() against plain scp over a loopback sshd, same files, same run.

    PYTHONPATH=src python bench/ship_speed.py [--repeat 3] [--sizes 1K,1M,100M]

put() runs on an open connection (as specpilot uses it); each scp run pays its own
connection and login. put() also does more than scp: temp file, fsync, a far-side sha256 (a Python read of the
whole file), and a rename. The table shows what that safety costs. Prints numbers;
asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.sshd import SshdServer, start_sshd, stop_sshd

from specpilot.hosts import open_host

_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str) -> int:
    return int(text[:-1]) * _UNITS[text[-1].upper()] if text[-1].isalpha() else int(text)


def scp_seconds(server: SshdServer, source: Path, dest: Path) -> float:
    argv = [
        "scp",
        "-q",
        "-B",
        "-P",
        str(server.port),
        "-i",
        server.identity_file,
        "-o",
        f"UserKnownHostsFile={server.known_hosts}",
        str(source),
        f"{server.user}@{server.host}:{dest}",
    ]
    started = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - started


async def put_seconds(server: SshdServer, data: bytes, dest: Path, repeat: int) -> list[float]:
    async with open_host(
        server.target, identity_file=server.identity_file, known_hosts=server.known_hosts
    ) as host:
        # Connection and host agent up outside the timing: specpilot keeps them open.
        await host.pid_alive(1)
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            await host.put(str(dest), data)
            timings.append(time.perf_counter() - started)
        return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1K,1M,100M")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ship-speed-") as scratch:
        workdir = Path(scratch)
        server = start_sshd(workdir / "sshd")
        try:
            print(f"loopback sshd on port {server.port}; median of {args.repeat} runs each")
            print(f"{'size':>6} | {'put s':>8} {'put MB/s':>9} | {'scp s':>8} {'scp MB/s':>9}")
            for label in args.sizes.split(","):
                size_bytes = parse_size(label)
                data = os.urandom(size_bytes)
                source = workdir / f"source-{label}"
                source.write_bytes(data)
                put_s = statistics.median(
                    asyncio.run(put_seconds(server, data, workdir / f"put-{label}", args.repeat))
                )
                scp_s = statistics.median(
                    scp_seconds(server, source, workdir / f"scp-{label}") for _ in range(args.repeat)
                )
                assert (workdir / f"put-{label}").read_bytes() == data
                megabytes = size_bytes / 1e6
                print(
                    f"{label:>6} | {put_s:8.3f} {megabytes / put_s:9.2f} | "
                    f"{scp_s:8.3f} {megabytes / scp_s:9.2f}"
                )
        finally:
            stop_sshd(server)


if __name__ == "__main__":
    main()
