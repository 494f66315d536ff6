"""A stand-in SGLang whose speed and acceptance follow its argv, for `specpilot bench` tests.

    python bench_engine.py --model-path M --port P [--speculative-num-steps K]
        [--max-running-requests N] [--speculative-adaptive] ...
    env: SPECPILOT_BENCH_PROFILE='{"0": {"step_s": 0.02, "accept": 1.0, "cap": 8}, "2": {...}}'
         keyed by draft tokens (--speculative-num-steps; 0 without speculation). A profile
         {"die": "<scenario>"} plays that scenario of scenarios.py instead (a start that fails).
         Optional keys: "die_at_request": N (the engine exits as its Nth chat request arrives:
         a death mid-measure), "setsid_child": FILE (at start, a child in a session of its
         own, its pid written to FILE: what a plain group stop misses once the engine is gone).
         Also optional, per profile: "step_per_request_s" (each running request adds this to a
         step), "graph_max_bs" and "eager_factor" (a step with more running requests than the
         captured graphs hold takes eager_factor times as long), "adaptive_from" (with
         --speculative-adaptive, from this many running requests on the step is the plain
         profile's, as SGLang's adaptive speculation turns drafting off; default 64),
         "prefill_s" (each request's first step, its prefill, adds this to the step),
         "prefill_eager_factor" (without the prefill CUDA graph a prefill takes this many times
         as long) and "prefill_graph_to_fraction" (the stand-in's own free-memory gate: the
         prefill graph is captured when --mem-fraction-static is at most this and
         --disable-prefill-cuda-graph is not given; default: always captured).

It prints SGLang's real startup lines (scenarios.SCENARIOS["sglang_ready"]), binds the port
at "Uvicorn running" as SGLang does, and serves what SGLang serves to bench and generate:
/health, /v1/models, /get_server_info (internal_states[].avg_spec_accept_length),
/metrics (sglang:spec_accept_length) and /v1/chat/completions, streaming or not.

The engine is a batch loop: every `step_s` each of the first min(cap, --max-running-requests)
waiting requests gets `accept` tokens on average (one verify step of speculative decoding);
the rest wait in the queue, as SGLang's scheduler holds requests past max_running_requests.
So its output tok/s at b running requests is b x accept / step (`tokens_per_s`): the speed
follows the argv (draft tokens, running-request cap, adaptive speculation, and the prefill
graph that the memory fraction keeps or loses).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_engine
from scenarios import SCENARIOS

READY = SCENARIOS["sglang_ready"]


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model-path", dest="model", default="model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--speculative-num-steps", type=int, default=0)
    parser.add_argument("--speculative-algorithm", default=None)
    parser.add_argument("--max-running-requests", type=int, default=1 << 30)
    parser.add_argument("--speculative-adaptive", action="store_true")
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--disable-prefill-cuda-graph", action="store_true")
    known, _ = parser.parse_known_args(argv)
    return known


#: SGLang 0.5.23's default batch size from which adaptive speculation stops drafting
ADAPTIVE_FROM = 64


def profile_at(profiles: dict[str, Any], steps: int, adaptive: bool, running: int) -> dict[str, Any]:
    """The profile one step runs with `running` requests (adaptive: plain's from its threshold)."""
    profile: dict[str, Any] = profiles[str(steps)]
    if adaptive and running >= int(profile.get("adaptive_from", ADAPTIVE_FROM)):
        return dict(profiles["0"])
    return profile


def prefill_graph(profile: dict[str, Any], mem_fraction: float | None, disabled: bool) -> bool:
    """Whether the stand-in captures its prefill graph: not turned off, and a fraction low
    enough to leave its gate the room."""
    gate = float(profile.get("prefill_graph_to_fraction", 1.0))
    return not disabled and (mem_fraction is None or mem_fraction <= gate)


def step_seconds(profile: dict[str, Any], running: int, joining: int = 0, graph: bool = True) -> float:
    """One step's time with `running` requests in it, `joining` of them prefilled in it."""
    step_s = float(profile["step_s"]) + float(profile.get("step_per_request_s", 0.0)) * running
    if running > int(profile.get("graph_max_bs", 1 << 30)):
        step_s *= float(profile.get("eager_factor", 1.0))
    prefill_s = float(profile.get("prefill_s", 0.0)) * joining
    return step_s + (prefill_s if graph else prefill_s * float(profile.get("prefill_eager_factor", 1.0)))


def tokens_per_s(profiles: dict[str, Any], steps: int, adaptive: bool, running: int) -> float:
    """Output tok/s at `running` requests: the stand-in's true speed, for tests to compare with."""
    profile = profile_at(profiles, steps, adaptive, running)
    return running * float(profile["accept"]) / step_seconds(profile, running)


@dataclass
class _Request:
    target: int
    finish: str
    thinking: bool
    chunks: asyncio.Queue[tuple[int, str | None]] = field(default_factory=asyncio.Queue)
    sent: int = 0


@dataclass
class Engine:
    profiles: dict[str, Any]
    steps: int
    adaptive: bool
    running_limit: int
    speculative: bool
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    waiting: list[_Request] = field(default_factory=list)
    verify_steps: int = 0
    tokens: int = 0
    die_at_request: int | None = None
    requests: int = 0
    graph: bool = True

    async def loop(self) -> None:
        while True:
            running = self.waiting[: self.running_limit]
            profile = profile_at(self.profiles, self.steps, self.adaptive, max(1, len(running)))
            joining = sum(1 for r in running if r.sent == 0)
            await asyncio.sleep(step_seconds(profile, len(running), joining, self.graph))
            accept = float(profile["accept"])
            for request in running:
                whole = int(accept)
                count = whole + (1 if self.rng.random() < accept - whole else 0)
                count = min(max(count, 1), request.target - request.sent)
                request.sent += count
                self.verify_steps += 1
                self.tokens += count
                done = request.sent >= request.target
                request.chunks.put_nowait((count, request.finish if done else None))
            self.waiting = [r for r in self.waiting if r.sent < r.target]

    def accept_length(self) -> float | None:
        return round(self.tokens / self.verify_steps, 3) if self.speculative and self.verify_steps else None


def _target(messages: Any, max_tokens: int) -> tuple[int, str]:
    """How long the answer to these messages is: a pure function of the prompt."""
    digest = int(hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest(), 16)
    if digest % 3 == 0:
        return max_tokens, "length"
    return max(1, int(max_tokens * (0.4 + 0.5 * (digest % 100) / 100))), "stop"


def app_for(engine: Engine, served: str) -> web.Application:
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": served}]})

    async def server_info(request: web.Request) -> web.Response:
        state: dict[str, object] = {"last_gen_throughput": 0.0}
        if engine.accept_length() is not None:
            state["avg_spec_accept_length"] = engine.accept_length()
        return web.json_response({"version": "0.5.13", "internal_states": [state]})

    async def metrics(request: web.Request) -> web.Response:
        lines = [
            f'sglang:num_running_reqs{{model_name="{served}"}} {min(len(engine.waiting), engine.running_limit)}'
        ]
        if engine.accept_length() is not None:
            lines.append(f'sglang:spec_accept_length{{model_name="{served}"}} {engine.accept_length()}')
        return web.Response(text="\n".join(lines) + "\n")

    async def chat(request: web.Request) -> web.StreamResponse:
        engine.requests += 1
        if engine.die_at_request is not None and engine.requests >= engine.die_at_request:
            print("Fatal: the engine died mid-measure", flush=True)
            os._exit(1)
        body = await request.json()
        target, finish = _target(body.get("messages"), int(body.get("max_tokens") or 64))
        thinking = bool((body.get("chat_template_kwargs") or {}).get("enable_thinking"))
        job = _Request(target, finish, thinking)
        engine.waiting.append(job)
        prompt_tokens = len(json.dumps(body.get("messages"))) // 4
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": target,
            "total_tokens": prompt_tokens + target,
        }
        if not body.get("stream"):
            reasoning, content = [], []
            while True:
                count, end = await job.chunks.get()
                for _ in range(count):
                    (reasoning if thinking and len(reasoning) < target // 2 else content).append("tok ")
                if end is not None:
                    break
            message = {
                "role": "assistant",
                "content": "".join(content),
                "reasoning_content": "".join(reasoning),
            }
            return web.json_response(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        written = 0
        while True:
            count, end = await job.chunks.get()
            key = "reasoning_content" if thinking and written < target // 2 else "content"
            written += count
            delta = {key: "tok " * count}
            event = {
                "id": "x",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": end}],
            }
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            if end is not None:
                break
        await response.write(
            b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n"
        )
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def serve(args: argparse.Namespace, profiles: dict[str, Any]) -> None:
    profile = profiles[str(args.speculative_num_steps)]
    engine = Engine(
        profiles=profiles,
        steps=args.speculative_num_steps,
        adaptive=args.speculative_adaptive,
        running_limit=min(int(profile.get("cap", 1 << 30)), args.max_running_requests),
        speculative=args.speculative_num_steps > 0,
        die_at_request=profile.get("die_at_request"),
        graph=prefill_graph(profile, args.mem_fraction_static, args.disable_prefill_cuda_graph),
    )
    if "setsid_child" in profile:
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        )
        Path(profile["setsid_child"]).write_text(str(child.pid))
    values = {"{host}": args.host, "{port}": str(args.port), "{pid}": str(os.getpid()), "{model}": args.model}
    runner = None
    for step in READY.steps:
        await asyncio.sleep(step.delay_s)
        if runner is None and "Uvicorn running on" in step.text:
            runner = web.AppRunner(app_for(engine, args.served_model_name or args.model), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, args.host, args.port).start()
        text = step.text.replace("{ts}", time.strftime("%Y-%m-%d %H:%M:%S"))
        for key, value in values.items():
            text = text.replace(key, value)
        print(text, flush=True)
    await engine.loop()


def main() -> None:
    args = _args(sys.argv[1:])
    profiles = json.loads(os.environ["SPECPILOT_BENCH_PROFILE"])
    profile = profiles[str(args.speculative_num_steps)]
    if "die" in profile:
        fake_engine.run(SCENARIOS[profile["die"]], fake_engine._parse_args(sys.argv[1:]))
        return
    asyncio.run(serve(args, profiles))


if __name__ == "__main__":
    main()
