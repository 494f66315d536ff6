"""Does smg's mesh (`--enable-mesh`, SWIM gossip) keep two routers' worker lists in step?
Measured, printed (not asserted). 127.0.0.1 only.

Two `smg launch --enable-mesh` routers, B peered with A, and two stand-in workers. Each step
does what `up` / `fleet-repair` do on one router and times how long the other takes to show
it (up to `--wait-s`; "never" past that):

1. add w1 on A                      -> listed ready on B
2. add w2 on B                      -> listed ready on A
3. delete w2 on A (a dead member)   -> gone from B
4. add w2 again on B (it restarted) -> listed ready on A     (fleet-repair's delete-then-add)
5. kill A, start it again           -> A lists both workers again

specpilot's `[router] replicas` uses independent routers (each registered on its own) rather
than the mesh when step 4 or 5 prints "never".

Usage: `python bench/smg_mesh.py [--smg PATH] [--wait-s 30]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the stand-in server of the tests

from tests.fakeengines.standin import StandIn  # noqa: E402

from fleet_router import _smg_executable  # noqa: E402 - a sibling of this script
from standin_http import free_port  # noqa: E402


def launch(
    smg: str, port: int, mesh_port: int, peers: list[str], name: str, work: Path
) -> subprocess.Popen[bytes]:
    argv = [smg, "launch", "--host", "127.0.0.1", "--port", str(port), "--policy", "least_load"]
    argv += [
        "--prometheus-port",
        str(free_port()),
        "--health-check-interval-secs",
        "1",
        "--log-level",
        "warn",
    ]
    argv += [
        "--enable-mesh",
        "--mesh-server-name",
        name,
        "--mesh-host",
        "127.0.0.1",
        "--mesh-port",
        str(mesh_port),
    ]
    if peers:
        argv += ["--mesh-peer-urls", *peers]
    log = (work / f"{name}.log").open("wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


async def workers(session: aiohttp.ClientSession, url: str) -> dict[str, tuple[str, str]]:
    """url -> (id, status) of each worker the router lists ready and healthy; {} if it does not answer."""
    try:
        async with session.get(f"{url}/workers", timeout=aiohttp.ClientTimeout(total=3)) as response:
            listed = (await response.json(content_type=None)).get("workers", [])
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return {}
    return {
        w["url"]: (w["id"], w["status"]) for w in listed if w.get("status") == "ready" and w.get("is_healthy")
    }


async def until(check: Callable[[], Awaitable[bool]], wait_s: float) -> float | None:
    """Seconds until `await check()` is true, None if it never is within wait_s."""
    start = time.monotonic()
    while time.monotonic() - start < wait_s:
        if await check():
            return round(time.monotonic() - start, 2)
        await asyncio.sleep(0.1)
    return None


async def measure(smg: str, wait_s: float, work: Path) -> dict[str, float | None]:
    ports = {n: (free_port(), free_port()) for n in "AB"}
    urls = {n: f"http://127.0.0.1:{p}" for n, (p, _) in ports.items()}
    peer = {n: f"127.0.0.1:{m}" for n, (_, m) in ports.items()}
    procs = {"A": launch(smg, *ports["A"], [], "A", work)}
    procs["B"] = launch(smg, *ports["B"], [peer["A"]], "B", work)
    w1, w2 = StandIn().start(), StandIn().start()
    result: dict[str, float | None] = {}
    try:
        async with aiohttp.ClientSession() as s:

            async def answering() -> bool:
                for url in urls.values():
                    try:
                        async with s.get(f"{url}/workers", timeout=aiohttp.ClientTimeout(total=1)):
                            pass
                    except (aiohttp.ClientError, TimeoutError):
                        return False
                return True

            await until(answering, 30)

            async def lists(router: str, worker: str, present: bool = True) -> bool:
                return (worker in await workers(s, urls[router])) == present

            await s.post(f"{urls['A']}/workers", json={"url": w1.url})
            result["1_add_on_A_seen_on_B_s"] = await until(lambda: lists("B", w1.url), wait_s)
            await s.post(f"{urls['B']}/workers", json={"url": w2.url})
            result["2_add_on_B_seen_on_A_s"] = await until(lambda: lists("A", w2.url), wait_s)
            await until(lambda: lists("A", w2.url), wait_s)
            worker_id = (await workers(s, urls["A"]))[w2.url][0]
            await s.delete(f"{urls['A']}/workers/{worker_id}")
            result["3_delete_on_A_gone_from_B_s"] = await until(lambda: lists("B", w2.url, False), wait_s)
            await until(lambda: lists("A", w2.url, False), wait_s)
            await s.post(f"{urls['B']}/workers", json={"url": w2.url})
            await until(lambda: lists("B", w2.url), wait_s)
            result["4_readd_on_B_seen_on_A_s"] = await until(lambda: lists("A", w2.url), wait_s)
            os.killpg(procs["A"].pid, signal.SIGKILL)
            procs["A"].wait()
            procs["A"] = launch(smg, *ports["A"], [peer["B"]], "A2", work)

            async def both() -> bool:
                return {w1.url, w2.url} <= set(await workers(s, urls["A"]))

            result["5_restarted_A_lists_both_s"] = await until(both, wait_s)
    finally:
        for proc in procs.values():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        w1.close()
        w2.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smg", default=None)
    parser.add_argument("--wait-s", type=float, default=30.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="smg-mesh-"))
    result = asyncio.run(measure(_smg_executable(args.smg, work), args.wait_s, work))
    print(json.dumps({k: ("never" if v is None else v) for k, v in result.items()}, indent=2))


if __name__ == "__main__":
    main()
