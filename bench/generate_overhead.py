"""Driver overhead of `specpilot generate` vs the usual client scripts (printed, not asserted).

A zero-latency OpenAI-compatible server (raw asyncio protocol, its own process, so its
CPU is not counted) answers every chat request with a short fixed response. In one run
the same prompts go through:

* specpilot generate's whole pipeline (`generate_in_loop`: ledger, fsynced part files);
* (a) `openai.AsyncOpenAI` + `asyncio.Semaphore`, answers appended to a JSONL file;
* (b) a `ThreadPoolExecutor` with the sync `openai.OpenAI` client, like public
  regeneration scripts.

Reported: requests/s (wall) and the driver's CPU time per request (process CPU of this
process, which excludes the server). Usage: `python bench/generate_overhead.py [--rows N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from standin_http import free_port, reply, serve

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
MODELS = json.dumps({"data": [{"id": "bench"}]}).encode()
ROUTES = (("/chat/completions", reply(RESPONSE)), ("/models", reply(MODELS)))


def _prompts(count: int) -> list[dict[str, object]]:
    return [
        {"id": f"r{i}", "messages": [{"role": "user", "content": f"What is 2+2? ({i})"}]}
        for i in range(count)
    ]


Runner = Callable[[str, list[dict[str, object]], int, Path], None]


def _measure(name: str, rows: int, work: Callable[[], None]) -> dict[str, float | str]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "driver": name,
        "requests_per_s": rows / wall,
        "cpu_us_per_request": cpu / rows * 1e6,
        "wall_s": wall,
    }


def run_specpilot(url: str, prompts: list[dict[str, object]], concurrency: int, work_dir: Path) -> None:
    from specpilot.generate.dispatch.endpoints import Endpoint
    from specpilot.generate.job import JobConfig, generate_in_loop
    from specpilot.generate.sampling import Sampling

    path = work_dir / "in.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    outcome = asyncio.run(
        generate_in_loop(
            JobConfig(
                path,
                work_dir / "out",
                [Endpoint(url)],
                "bench",
                Sampling(True),
                concurrency=concurrency,
                show_progress=False,
            )
        )
    )
    assert outcome.summary.done == len(prompts), outcome.message


def run_async_openai(url: str, prompts: list[dict[str, object]], concurrency: int, work_dir: Path) -> None:
    import openai

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=3)
        limit = asyncio.Semaphore(concurrency)
        with (work_dir / "async_openai.jsonl").open("w") as out:

            async def one(prompt: dict[str, object]) -> None:
                async with limit:
                    response = await client.chat.completions.create(  # type: ignore[call-overload]
                        model="bench",
                        messages=prompt["messages"],
                        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
                    )
                message = response.choices[0].message
                out.write(json.dumps({"id": prompt["id"], "content": message.content}) + "\n")

            await asyncio.gather(*(one(p) for p in prompts))
        await client.close()

    asyncio.run(main())


def run_thread_pool(url: str, prompts: list[dict[str, object]], concurrency: int, work_dir: Path) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=3)

    def one(prompt: dict[str, object]) -> str:
        response = client.chat.completions.create(  # type: ignore[call-overload]
            model="bench",
            messages=prompt["messages"],
            extra_body={"chat_template_kwargs": {"enable_thinking": True}},
        )
        return json.dumps({"id": prompt["id"], "content": response.choices[0].message.content})

    with ThreadPoolExecutor(concurrency) as pool, (work_dir / "threads.jsonl").open("w") as out:
        for line in pool.map(one, prompts):
            out.write(line + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--only-specpilot", action="store_true", help="Skip the two reference clients (they take ~2 minutes)."
    )
    parser.add_argument("--repeat", type=int, default=1, help="Runs of each driver; all printed.")
    args = parser.parse_args()
    # Imports are one-off costs, not per request: load every client before measuring.
    import openai  # noqa: F401

    import specpilot.generate.job  # noqa: F401

    port = free_port()
    server = multiprocessing.Process(target=serve, args=(port, ROUTES), daemon=True)
    server.start()
    time.sleep(0.5)
    url = f"http://127.0.0.1:{port}"
    prompts = _prompts(args.rows)
    results = []
    try:
        drivers: list[tuple[str, Runner]] = [("specpilot generate", run_specpilot)]
        if not args.only_specpilot:
            drivers += [
                ("(a) AsyncOpenAI + Semaphore", run_async_openai),
                ("(b) ThreadPool + OpenAI", run_thread_pool),
            ]
        for name, runner in drivers:
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as work:
                    results.append(
                        _measure(name, args.rows, partial(runner, url, prompts, args.concurrency, Path(work)))
                    )
    finally:
        server.kill()
    print(f"{args.rows} requests, concurrency {args.concurrency}, zero-latency local server")
    print(f"{'driver':32} {'req/s':>9} {'CPU us/req':>11} {'wall s':>8}")
    for r in results:
        print(
            f"{r['driver']:32} {r['requests_per_s']:9.0f} {r['cpu_us_per_request']:11.0f} {r['wall_s']:8.2f}"
        )
    best = {
        r["driver"]: float(r["requests_per_s"])
        for r in sorted(results, key=lambda r: float(r["requests_per_s"]))
    }
    if len(best) == 3:
        ours = best["specpilot generate"]
        print(
            f"specpilot vs (a): {ours / best['(a) AsyncOpenAI + Semaphore']:.1f}x req/s, "
            f"vs (b): {ours / best['(b) ThreadPool + OpenAI']:.1f}x req/s (best runs)"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
