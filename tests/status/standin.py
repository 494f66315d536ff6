"""A scripted OpenAI-compatible stand-in whose answers a test can hold, so a job's state stays put.

Behaviour is a function of markers in the prompt: `HOLD` waits until `release()`,
`TOO-LONG` gets a 400, `RETRY` gets one 429 first (from whichever stand-in sees it first), `EMPTY` gets empty content (the
row is flagged). Completion lengths vary with the prompt's number, for a histogram.
`/metrics` exports SGLang's acceptance-length gauge.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

ACCEPT_LENGTH = 2.75


def completion_tokens_for(prompt: str) -> int:
    number = int(prompt.split()[-1])
    return 5 + (number * 37) % 200


class StandIn:
    def __init__(self, retried: set[str]) -> None:
        """`retried`: prompts already refused once, shared by stand-ins so a row gets one 429 in all."""
        self.port = 0
        self.answered = 0
        self._retried = retried
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._gate = asyncio.run_coroutine_threadsafe(self._make_gate(), self._loop).result(5)
        self._runner: web.AppRunner | None = None

    @staticmethod
    async def _make_gate() -> asyncio.Event:
        return asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StandIn:
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._gate.set)

    def close(self) -> None:
        self.release()
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "standin-model"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=f"# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length {ACCEPT_LENGTH}\n"
        )

    async def _chat(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        prompt = str(body["messages"][-1]["content"])
        if "HOLD" in prompt:
            await self._gate.wait()
        if "TOO-LONG" in prompt:
            return web.json_response({"error": {"message": "maximum context length exceeded"}}, status=400)
        if "RETRY" in prompt and prompt not in self._retried:
            self._retried.add(prompt)
            return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "0"})
        self.answered += 1
        tokens = completion_tokens_for(prompt)
        content = "" if "EMPTY" in prompt else "an answer"
        message = {"role": "assistant", "content": content, "reasoning_content": "some thinking"}
        return web.json_response(
            {
                "id": "chatcmpl-standin",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": tokens, "total_tokens": 7 + tokens},
            }
        )
