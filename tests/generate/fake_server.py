"""A local OpenAI-compatible chat server with fault injection, for the generate tests.

Answers are a pure function of the prompt, so a test can check every output row. Faults:
fixed latency, bursts of 429, a rate of 500s, dropped connections (transport closed
without a response), prompts that always get a 400 ("context too long"), and the whole
server going away and coming back (`stop()`/`start()` on the same port). `/metrics`
exports vLLM's speculative-decoding counters. Run as a script for a separate process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

ACCEPTED_PER_DRAFT = 2.5  # /metrics reports mean acceptance length 1 + 2.5 = 3.5
FATAL_MARKER = "TOO-LONG"
CUT_MARKER = "CUT-OFF"  # answered with finish_reason "length"


def answer_for(prompt: str) -> tuple[str, str]:
    """(content, reasoning) the server gives for a prompt: tests recompute it."""
    return f"answer: {prompt}", f"thinking about {prompt}"


@dataclass
class Faults:
    latency_s: float = 0.0
    burst_429_every: int = 0  # every Nth request starts a burst of 429s ...
    burst_429_length: int = 3  # ... this many long
    error_500_rate: float = 0.0
    drop_rate: float = 0.0
    reasoning_field: str = "reasoning_content"  # or vLLM's newer "reasoning"
    #: no reasoning parser: "" (the server has one), "think" (`<think>\nR\n</think>\n\nA` in
    #: content), "closing" (Qwen3.5/3.6: the prompt opened `<think>`, so only `R\n</think>\n\nA`),
    #: "none" (a model that does not think: content only)
    inline_thinking: str = ""
    #: CUT_MARKER prompts are answered in full when max_tokens is at least this (0: never)
    cut_unless_max_tokens: int = 0
    seed: int = 7


@dataclass
class Counts:
    requests: int = 0
    answered: int = 0
    rate_limited: int = 0
    errors_500: int = 0
    dropped: int = 0
    per_prompt: Counter[str] = field(default_factory=Counter)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # every answered request


class FakeServer:
    """Serve on 127.0.0.1 from a background thread (its own event loop)."""

    def __init__(self, faults: Faults | None = None, port: int = 0) -> None:
        self.faults = faults or Faults()
        self.counts = Counts()
        self.port = port
        self._random = random.Random(self.faults.seed)
        self._burst_left = 0
        self._drafts = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeServer:
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        accepted = self._drafts * ACCEPTED_PER_DRAFT
        text = (
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f'vllm:spec_decode_num_drafts_total{{model_name="fake-model"}} {self._drafts}\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="fake-model"}} '
            f"{accepted}\n"
        )
        return web.Response(text=text)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        faults, counts = self.faults, self.counts
        counts.requests += 1
        number = counts.requests
        if faults.latency_s:
            await asyncio.sleep(faults.latency_s)
        if faults.burst_429_every and number % faults.burst_429_every == 0:
            self._burst_left = faults.burst_429_length
        if self._burst_left > 0:
            self._burst_left -= 1
            counts.rate_limited += 1
            return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "0"})
        if self._random.random() < faults.error_500_rate:
            counts.errors_500 += 1
            return web.json_response({"error": "internal"}, status=500)
        if self._random.random() < faults.drop_rate:
            counts.dropped += 1
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        prompt = str(body["messages"][-1]["content"])
        if FATAL_MARKER in prompt:
            return web.json_response(
                {"error": {"message": "This model's maximum context length is 8 tokens"}}, status=400
            )
        thinking = bool(body.get("chat_template_kwargs", {}).get("enable_thinking"))
        content, reasoning = answer_for(prompt)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        inline = faults.inline_thinking
        if thinking and not inline:
            message[faults.reasoning_field] = reasoning
        elif thinking and inline != "none":
            opening = "<think>\n" if inline == "think" else ""
            message["content"] = f"{opening}{reasoning}\n</think>\n\n{content}"
        budget = body.get("max_tokens") or 0
        cut = CUT_MARKER in prompt and not (
            faults.cut_unless_max_tokens and budget >= faults.cut_unless_max_tokens
        )
        counts.answered += 1
        counts.per_prompt[prompt] += 1
        counts.bodies.append(body)
        self._drafts += 1
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "length" if cut else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt.split()),
                    "completion_tokens": 4,
                    "total_tokens": len(prompt.split()) + 4,
                },
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--latency-s", type=float, default=0.0)
    args = parser.parse_args()
    server = FakeServer(Faults(latency_s=args.latency_s), port=args.port).start()
    with open(args.port_file + ".tmp", "w") as handle:
        json.dump({"port": server.port}, handle)
    import os

    os.replace(args.port_file + ".tmp", args.port_file)
    threading.Event().wait()


if __name__ == "__main__":
    main()
