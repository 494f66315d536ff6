"""The fleet at job scale, measured (printed, not asserted). 127.0.0.1 only.

`specpilot up FLEET` starts `--workers` stand-in engines (bench/standin_engine.py as
`[engine] command`: SGLang's start-up lines, then answers that take as long as a real
generation: log-normal output lengths, `--output-tokens` mean at `--tokens-per-s`) behind
the real `smg`. Then, with `--concurrency` requests open per worker either way:

* direct: the job sends to every member itself (`--server` per member);
* router: `generate --fleet` through the router;

reported: rows/s, the job's CPU per row and per worker (GPU), the router's CPU per row.

* faults: `generate --fleet --max-attempts 1` in its own process while `--faults` faults
  land at random (a member's engine killed, the router killed, each followed by
  `fleet-repair`, or the driver killed -9 and started again): 0 rows lost, 0 duplicated,
  0 failed (an attempt spent on a dead worker would fail its row at --max-attempts 1).
* driver kills: `--driver-kills` kill -9s of `generate` at random, each run again; the
  rows sent again per kill, from the stand-ins' own request counts, beside what was in
  flight in the ledger at the kill.

Full scale (the job it was built for): `--workers 64 --concurrency 64 --rows 20000`
(4,096 open). On a small machine scale down: `--workers 16 --concurrency 16 --rows 4000`.

Usage: `python bench/fleet_scale.py [--workers N] [--concurrency C] [--rows R] [--smg PATH]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the tests' fixtures: a tiny model config

from tests.launch.conftest import TINY_QWEN3_CONFIG, toml_value  # noqa: E402

from fleet_router import _smg_executable  # noqa: E402 - a sibling of this script

NAME = "scale"
STANDIN = Path(__file__).resolve().parent / "standin_engine.py"
#: how long a whole job (or `up`) may take before the bench gives up on it
JOB_TIMEOUT_S = 3600.0


def free_port_run(count: int) -> int:
    """A first port with `count` free ports from it (one per member)."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(20000, 60000 - count)
        try:
            for port in range(first, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no run of free ports")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_fleet(work: Path, args: argparse.Namespace) -> Path:
    model = work / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_QWEN3_CONFIG))
    env = {
        "STANDIN_OUTPUT_TOKENS": str(args.output_tokens),
        "STANDIN_SIGMA": str(args.sigma),
        "STANDIN_TOKENS_PER_S": str(args.tokens_per_s),
        "STANDIN_TTFT_S": str(args.ttft_s),
    }
    sections: dict[str, dict[str, object]] = {
        "model": {"path": "model", "served_name": "bench"},
        "gpu": {"memory_gib": 95.6},
        "engine": {
            "name": "sglang",
            "version": "0.5.13",
            "command": [sys.executable, str(STANDIN)],
            "env": env,
        },
        "server": {"port": free_port_run(args.workers), "ready_timeout_s": 600.0},
        "host": {"target": "local"},
    }
    lines = ['name = "member"']
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in values.items()]
    (work / "member.toml").write_text("\n".join(lines) + "\n")
    port = free_port_run(4)
    fleet = work / "scale.fleet.toml"
    fleet.write_text(
        f'[fleet]\nname = "{NAME}"\nserver = "member.toml"\n'
        f'hosts = [{{ target = "local", gpus = {args.workers} }}]\n'
        f"[router]\nport = {port}\nmetrics_port = {port + 1}\n"
    )
    return fleet


def cli(
    env: dict[str, str], *args: str, timeout_s: float = JOB_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specpilot", *args], capture_output=True, text=True, env=env, timeout=timeout_s
    )


def group_cpu_s(pgid: int) -> float:
    """utime + stime of every live process in a process group (the router and its helpers)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def record(home: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((home / "fleets" / f"{NAME}.json").read_text())
    return data


def member_pgid(home: Path, index: int) -> int:
    return int(json.loads((home / "runs" / f"{NAME}-{index}" / "state.json").read_text())["pgid"])


def received(urls: list[str]) -> int:
    """Chat requests the stand-ins have received (GET /stats)."""

    async def go() -> int:
        async with aiohttp.ClientSession() as session:
            total = 0
            for url in urls:
                try:
                    async with session.get(f"{url}/stats") as response:
                        total += int((await response.json(content_type=None))["received"])
                except aiohttp.ClientError:
                    continue  # a stand-in being restarted
            return total

    return asyncio.run(go())


def write_input(path: Path, rows: int) -> Path:
    with path.open("w") as out:
        for i in range(rows):
            out.write(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"q {i}"}]}) + "\n")
    return path


def output_ids(out: Path) -> list[str]:
    return [json.loads(line)["id"] for part in sorted(out.rglob("part-*.jsonl")) for line in part.open()]


def in_process_job(endpoints: list[Any], source: Path, out: Path, concurrency: int) -> dict[str, Any]:
    from specpilot.generate.job import JobConfig, generate_in_loop
    from specpilot.generate.sampling import Sampling

    outcome = asyncio.run(
        generate_in_loop(
            JobConfig(
                source, out, endpoints, "bench", Sampling(True), concurrency=concurrency, show_progress=False
            )
        )
    )
    summary: dict[str, Any] = outcome.summary.to_json()
    return summary


def steady_rows_per_s(out: Path) -> float:
    """Rows/s between the 10th and the 90th percentile of finish times: the job's pace once
    every request is open and before the long tail of the last, longest answers."""
    with sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True, timeout=30) as db:
        done = sorted(t for (t,) in db.execute("SELECT done_at FROM rows WHERE state = 2"))
    low, high = done[len(done) // 10], done[len(done) * 9 // 10]
    return round((len(done) * 8 // 10) / (high - low), 1) if high > low else 0.0


def measure(
    name: str, rows: int, workers: int, run: Callable[[], dict[str, Any]], router_pgid: int | None, out: Path
) -> dict[str, Any]:
    router_cpu = group_cpu_s(router_pgid) if router_pgid else 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    summary = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row: dict[str, Any] = {
        "path": name,
        "rows_per_s": round(rows / wall, 1),
        "steady_rows_per_s": steady_rows_per_s(out),
        "job_cpu_us_per_row": round(cpu / rows * 1e6),
        "job_cpu_pct_per_worker": round(100 * cpu / wall / workers, 3),
        "wall_s": round(wall, 1),
        "done": summary["done"],
        "failed": summary["failed"],
    }
    if router_pgid:
        router_s = group_cpu_s(router_pgid) - router_cpu
        row["router_cpu_us_per_row"] = round(router_s / rows * 1e6)
        row["router_cpu_pct_per_worker"] = round(100 * router_s / wall / workers, 3)
    return row


class Driver:
    """`generate` in its own process group, run again until it exits; killable -9."""

    def __init__(self, env: dict[str, str], argv: list[str]) -> None:
        self.env, self.argv = env, argv
        self.proc: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()
        self.kills = 0

    def run_to_end(self) -> dict[str, Any]:
        deadline_s = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline_s:
            with self.lock:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "specpilot", *self.argv],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=self.env,
                    start_new_session=True,
                )
            stdout, _ = self.proc.communicate()
            if self.proc.returncode == 0:
                summary: dict[str, Any] = json.loads(stdout)
                return summary
            if self.proc.returncode != -signal.SIGKILL:
                raise RuntimeError(f"generate exited {self.proc.returncode}: {stdout[-2000:]}")
        raise RuntimeError("the job did not finish")

    def kill(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.kills += 1


def in_flight(out: Path) -> int:
    """Rows the ledger holds as sent and not done (what a killed driver had in flight)."""
    with sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True, timeout=30) as db:
        return int(db.execute("SELECT COUNT(*) FROM rows WHERE state = 1").fetchone()[0])


def committed(out: Path) -> int:
    try:
        with sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True, timeout=30) as db:
            return int(db.execute("SELECT COUNT(*) FROM rows WHERE state = 2").fetchone()[0])
    except sqlite3.Error:
        return 0


def generate_argv(source: Path, out: Path, concurrency: int) -> list[str]:
    return ["generate", "--input", str(source), "--output", str(out), "--fleet", NAME,
            "--concurrency", str(concurrency), "--max-attempts", "1", "--json"]  # fmt: skip


def fault_run(
    env: dict[str, str], home: Path, urls: list[str], args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    rows = args.rows
    source = write_input(work / "faults.jsonl", rows)
    out = work / "faults-out"
    driver = Driver(env, generate_argv(source, out, args.concurrency))
    rng = random.Random(args.seed)
    kinds = ["worker", "router", "driver"]
    plan = [kinds[i % 3] for i in range(args.faults)]
    rng.shuffle(plan)
    done: list[str] = []
    repairs: list[int] = []
    rejoin_s: list[float] = []
    stop = threading.Event()

    def chaos() -> None:
        for kind in plan:
            target = committed(out) + rows // (args.faults + 2)
            while committed(out) < min(target, rows - 1) and not stop.wait(0.1):
                pass
            if stop.is_set() or committed(out) >= rows - 1:
                return
            if kind == "worker":
                os.killpg(member_pgid(home, rng.randrange(args.workers)), signal.SIGKILL)
            elif kind == "router":
                os.killpg(int(record(home)["routers"][0]["pid"]), signal.SIGKILL)
            else:
                driver.kill()
            done.append(kind)
            if kind != "driver":
                time.sleep(0.5)  # the kill has landed
                repairs.append(cli(env, "fleet-repair", NAME, "--backoff-s", "0").returncode)
            if kind == "router":  # the router answers again: how soon does the job send?
                since_s, before = time.monotonic(), received(urls)
                while received(urls) == before and time.monotonic() - since_s < 60:
                    time.sleep(0.02)
                rejoin_s.append(round(time.monotonic() - since_s, 2))

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    wall = time.perf_counter()
    summary = driver.run_to_end()
    wall = time.perf_counter() - wall
    stop.set()
    thread.join(60)
    ids = output_ids(out)
    return {
        "path": "router + faults",
        "faults": done,
        "fleet_repair_exit_codes": repairs,
        "first_request_after_router_repair_s": rejoin_s,
        "rows_per_s": round(rows / wall, 1),
        "done": summary["done"],
        "lost": rows - len(set(ids)),
        "duplicated": len(ids) - len(set(ids)),
        "failed": summary["failed"],
    }


def driver_kills(
    env: dict[str, str], urls: list[str], args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    rows = args.rows
    source = write_input(work / "kills.jsonl", rows)
    out = work / "kills-out"
    driver = Driver(env, generate_argv(source, out, args.concurrency))
    at_kill: list[int] = []
    before = received(urls)

    def chaos() -> None:
        for i in range(args.driver_kills):
            target = rows * (i + 1) // (args.driver_kills + 1)
            while committed(out) < target:
                time.sleep(0.05)
            driver.kill()
            time.sleep(0.3)
            at_kill.append(in_flight(out))

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    summary = driver.run_to_end()
    thread.join(60)
    time.sleep(1.0)  # requests of the killed drivers still reach the stand-ins' counters
    sent_again = received(urls) - before - rows
    return {
        "path": "driver kill -9",
        "kills": driver.kills,
        "open_requests": args.concurrency * args.workers,
        "ledger_in_flight_at_kill": at_kill,
        "rows_sent_again_per_kill": round(sent_again / max(driver.kills, 1)),
        "done": summary["done"],
        "duplicated": len(output_ids(out)) - len(set(output_ids(out))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64, help="Open requests per worker.")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--output-tokens", type=int, default=512, help="Mean output tokens per request.")
    parser.add_argument("--sigma", type=float, default=0.6, help="Log-normal sigma of output lengths.")
    parser.add_argument("--tokens-per-s", type=float, default=256.0, help="Decode speed per request.")
    parser.add_argument("--ttft-s", type=float, default=0.2)
    parser.add_argument("--faults", type=int, default=6)
    parser.add_argument("--driver-kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--smg", default=None)
    parser.add_argument(
        "--skip", action="append", default=[], choices=["direct", "router", "faults", "kills"]
    )
    args = parser.parse_args()
    from specpilot.generate.dispatch.endpoints import Endpoint, resolve_endpoints

    work = Path(tempfile.mkdtemp(prefix="fleet-scale-"))
    home = work / "home"
    os.environ["SPECPILOT_HOME"] = str(home)
    os.environ["SPECPILOT_SMG"] = _smg_executable(args.smg, work)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    fleet = write_fleet(work, args)
    mean_s = args.ttft_s + args.output_tokens / args.tokens_per_s
    print(
        f"{args.workers} stand-in workers x {args.concurrency} open = {args.workers * args.concurrency} open "
        f"requests, {args.rows} rows, mean {args.output_tokens} output tokens at {args.tokens_per_s:g} tok/s "
        f"(mean request {mean_s:.1f} s, sigma {args.sigma}); {os.cpu_count()} cores",
        flush=True,
    )
    started = time.perf_counter()
    up = cli(env, "up", str(fleet), "--json")
    try:
        up_out = json.loads(up.stdout)
        print(
            json.dumps({"up_s": round(time.perf_counter() - started, 1), "registered": up_out["registered"]}),
            flush=True,
        )
        urls = [m["worker_url"] for m in up_out["members"]]
        router_pgid = int(record(home)["routers"][0]["pid"])
        if "direct" not in args.skip:
            source = write_input(work / "direct.jsonl", args.rows)
            direct = [Endpoint(url) for url in urls]
            print(json.dumps(measure("direct", args.rows, args.workers,
                lambda: in_process_job(direct, source, work / "direct-out", args.concurrency), None,
                work / "direct-out")), flush=True)  # fmt: skip
        if "router" not in args.skip:
            source = write_input(work / "router.jsonl", args.rows)
            routed = resolve_endpoints((), (), (), (NAME,))
            print(json.dumps(measure("router", args.rows, args.workers,
                lambda: in_process_job(routed, source, work / "router-out", args.concurrency), router_pgid,
                work / "router-out")), flush=True)  # fmt: skip
        if "faults" not in args.skip:
            print(json.dumps(fault_run(env, home, urls, args, work)), flush=True)
        if "kills" not in args.skip:
            print(json.dumps(driver_kills(env, urls, args, work)), flush=True)
    finally:
        cli(env, "down", NAME)


if __name__ == "__main__":
    main()
