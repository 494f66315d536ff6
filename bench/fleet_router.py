"""A fleet's router in the job's path, measured (printed, not asserted). 127.0.0.1 only.

N stand-in OpenAI servers (16 by default; raw asyncio protocol, one process each, zero
latency, so the numbers are the drivers' ceiling) answer chat completions, /health and
/v1/models. The same prompts go:

* direct: `specpilot generate` with N `--server`s (its own least-loaded dispatch);
* router: through a real `smg` (least_load) with the N servers registered, as
  `generate --router` does (`--concurrency` per worker, so the same total in flight).

Reported: rows/s, the job's CPU per row, and (router) the router's own CPU per row.
Then a fault run through the router: every `--kill-every-s` a random worker is killed
and deregistered, and brought back `--down-s` later (started, then registered again, as
`fleet-repair` does); the check is 0 rows lost, 0 duplicated, 0 failed.

Usage: `python bench/fleet_router.py [--workers 16] [--rows 20000] [--smg PATH]`
(default: the cached `smg` environment, built on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.fleet.routerproc starts the router as the tests do

from standin_http import free_port, reply, serve  # noqa: E402 - a sibling of this script

RESPONSE = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Four.", "reasoning_content": "2+2=4"},
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }
).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]}).encode()


ROUTES = (("/chat/completions", reply(RESPONSE)), ("/models", reply(MODELS)), ("/health", reply(b"")))


class Worker:
    def __init__(self) -> None:
        self.port = free_port()
        self.process: multiprocessing.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = multiprocessing.Process(target=serve, args=(self.port, ROUTES), daemon=True)
        self.process.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"stand-in on {self.port} did not start")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()


def _smg_executable(given: str | None, work: Path) -> str:
    if given:
        return given
    from specpilot.demo.enginevenv import ensure_engine_venv

    python = ensure_engine_venv("smg", log=lambda line: print(line, file=sys.stderr))
    wrapper = work / "smg"
    wrapper.write_text(f'#!/bin/sh\nexec "{python}" -m smg "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _admin(url: str, method: str, *args: object) -> object:
    from specpilot.fleet.router import RouterClient

    async def go() -> object:
        async with aiohttp.ClientSession() as session:
            return await getattr(RouterClient(session, url), method)(*args)

    return asyncio.run(go())


@contextmanager
def router(smg: str, workers: list[Worker], work: Path) -> Iterator[tuple[str, int]]:
    from tests.fleet.routerproc import start_router

    from specpilot.fleet.router import router_argv
    from specpilot.fleet.spec import RouterSection
    from specpilot.hosts.local import LocalHost
    from specpilot.launch.stop import stop_group

    section = RouterSection.model_validate({"port": free_port(), "health_check_interval_s": 1})
    process = asyncio.run(start_router(router_argv(smg, section, free_port())))
    url = f"http://127.0.0.1:{section.port}"
    try:
        for worker in workers:
            problem = _admin(url, "add", worker.url, 30.0)
            assert problem is None, problem
        yield url, process.pid
    finally:
        asyncio.run(stop_group(LocalHost(), process.pid, term_timeout_s=10, start_ticks=process.start_ticks))


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _job(endpoints: list[object], rows: int, concurrency: int, work: Path) -> dict[str, object]:
    from specpilot.generate.job import JobConfig, generate_in_loop
    from specpilot.generate.sampling import Sampling

    source = work / "in.jsonl"
    if not source.exists():
        source.write_text(
            "".join(
                json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"2+2? ({i})"}]}) + "\n"
                for i in range(rows)
            )
        )
    out = Path(tempfile.mkdtemp(dir=work))
    outcome = asyncio.run(
        generate_in_loop(
            JobConfig(
                source, out, endpoints, "bench", Sampling(True), concurrency=concurrency, show_progress=False
            )  # type: ignore[arg-type]
        )
    )
    ids = [
        json.loads(line)["id"] for part in sorted((out / "data").glob("part-*.jsonl")) for line in part.open()
    ]
    return {"summary": outcome.summary.to_json(), "ids": len(ids), "unique_ids": len(set(ids))}


def _measure(name: str, rows: int, run: object, router_pid: int | None = None) -> dict[str, object]:
    router_cpu = _cpu_s(router_pid) if router_pid else 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()  # type: ignore[operator]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row: dict[str, object] = {
        "path": name,
        "rows_per_s": round(rows / wall, 1),
        "job_cpu_us_per_row": round(cpu / rows * 1e6),
        "wall_s": round(wall, 2),
        "done": result["summary"]["done"],
        "failed": result["summary"]["failed"],
        "retries": result["summary"]["retries"],
        "unique_ids": result["unique_ids"],
    }
    if router_pid:
        row["router_cpu_us_per_row"] = round((_cpu_s(router_pid) - router_cpu) / rows * 1e6)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=4, help="Per worker.")
    parser.add_argument("--kill-every-s", type=float, default=0.5)
    parser.add_argument("--down-s", type=float, default=1.0)
    parser.add_argument("--smg", default=None)
    parser.add_argument("--skip-fault-run", action="store_true")
    args = parser.parse_args()
    import specpilot.generate.job  # noqa: F401  (imports are not per row)
    from specpilot.generate.dispatch.endpoints import Endpoint

    work = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    smg = _smg_executable(args.smg, work)
    workers = [Worker() for _ in range(args.workers)]
    for worker in workers:
        worker.start()
    results = []
    try:
        direct = [Endpoint(w.url) for w in workers]
        results.append(
            _measure("direct", args.rows, lambda: _job(direct, args.rows, args.concurrency, work))  # type: ignore[arg-type]
        )
        with router(smg, workers, work) as (url, pid):
            routed = [Endpoint(url, router=True, slots=len(workers))]
            results.append(
                _measure("router", args.rows, lambda: _job(routed, args.rows, args.concurrency, work), pid)  # type: ignore[arg-type]
            )
            if not args.skip_fault_run:
                results.append(_fault_run(url, pid, workers, routed, args, work))
    finally:
        for worker in workers:
            worker.kill()
    print(f"{args.workers} zero-latency stand-ins, {args.rows} rows, concurrency {args.concurrency}/worker")
    for row in results:
        print(json.dumps(row))


def _fault_run(
    url: str, pid: int, workers: list[Worker], routed: list[object], args: argparse.Namespace, work: Path
) -> dict[str, object]:
    stop = threading.Event()
    kills = [0]
    rng = random.Random(7)

    def chaos() -> None:
        while not stop.wait(args.kill_every_s):
            victim = rng.choice(workers)
            victim.kill()
            _admin(url, "remove", victim.url)  # what fleet-repair does first
            kills[0] += 1
            if stop.wait(args.down_s):
                victim.start()
                return
            victim.start()
            _admin(url, "add", victim.url, 30.0)

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    try:
        row = _measure(
            "router + faults", args.rows, lambda: _job(routed, args.rows, args.concurrency, work), pid
        )  # type: ignore[arg-type]
    finally:
        stop.set()
        thread.join(30)
    row["workers_killed"] = kills[0]
    row["lost"] = args.rows - int(row["done"])  # type: ignore[call-overload]
    row["duplicated"] = int(row["done"]) - int(row["unique_ids"])  # type: ignore[call-overload]
    return row


if __name__ == "__main__":
    main()
