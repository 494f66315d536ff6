"""A stand-in engine for fleet benchmarks, started by `specpilot up` as `[engine] command`.

It prints SGLang's real start-up lines (tests/fakeengines/scenarios.py, "sglang_ready") so
`up` sees it start and become ready as it does a real server, then serves the OpenAI API
from one asyncio loop: each chat completion is answered after the time a real engine would
take to generate it. Output lengths follow a log-normal (a bulk job's long tail of thinking
traces); the time is `STANDIN_TTFT_S + tokens / STANDIN_TOKENS_PER_S`.

    env: STANDIN_OUTPUT_TOKENS  mean output tokens per request (default 512)
         STANDIN_SIGMA          log-normal sigma of the output length (default 0.6)
         STANDIN_TOKENS_PER_S   decode speed per request (default 256)
         STANDIN_TTFT_S         time to the first token (default 0.2)

GET /stats answers {"received": N, "answered": M}.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fakeengines"))
from scenarios import SCENARIOS  # the stand-ins' shared scenario data

from standin_http import next_request  # a sibling of this script: the same request reading

NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


def reply(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


class Settings:
    def __init__(self) -> None:
        mean = float(os.environ.get("STANDIN_OUTPUT_TOKENS", "512"))
        self.sigma = float(os.environ.get("STANDIN_SIGMA", "0.6"))
        self.mu = math.log(mean) - self.sigma**2 / 2  # so the mean is `mean`
        self.tokens_per_s = float(os.environ.get("STANDIN_TOKENS_PER_S", "256"))
        self.ttft_s = float(os.environ.get("STANDIN_TTFT_S", "0.2"))

    def tokens(self) -> int:
        return max(1, int(random.lognormvariate(self.mu, self.sigma)))


class Counts:
    received = 0
    answered = 0


class Http(asyncio.Protocol):
    def __init__(self, settings: Settings, models: bytes, counts: Counts) -> None:
        self.settings, self.models, self.counts = settings, models, counts
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (request := next_request(self.buffer)) is not None:
            path, body, self.buffer = request
            self.answer(path, body)

    def answer(self, path: str, body: bytes) -> None:
        assert self.transport is not None
        if path.endswith("/chat/completions"):
            self.counts.received += 1
            request = json.loads(body)
            tokens = self.settings.tokens()
            delay_s = self.settings.ttft_s + tokens / self.settings.tokens_per_s
            content = "x" * (4 * tokens)  # about four bytes a token on the wire
            answer = {
                "id": "c",
                "object": "chat.completion",
                "model": request.get("model", "bench"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content, "reasoning_content": "r"},
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens},
            }
            asyncio.get_running_loop().call_later(delay_s, self.send, reply(json.dumps(answer).encode()))
        elif path.endswith("/models"):
            self.transport.write(reply(self.models))
        elif path.endswith("/health"):
            self.transport.write(reply(b""))
        elif path.endswith("/stats"):
            stats = {"received": self.counts.received, "answered": self.counts.answered}
            self.transport.write(reply(json.dumps(stats).encode()))
        else:
            self.transport.write(NOT_FOUND)

    def send(self, response: bytes) -> None:
        # a pipelined client would need order kept; the router and aiohttp send one at a time
        if self.transport is not None:
            self.counts.answered += 1
            self.transport.write(response)


def argv_value(flag: str, default: str) -> str:
    args = sys.argv[1:]
    return args[args.index(flag) + 1] if flag in args else default


async def serve(host: str, port: int, served: str) -> None:
    counts = Counts()
    models = json.dumps({"object": "list", "data": [{"id": served, "object": "model"}]}).encode()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Http(Settings(), models, counts), host, port, backlog=4096)
    print_lines(host, port, argv_value("--model-path", "model"))
    await server.serve_forever()


def print_lines(host: str, port: int, model: str) -> None:
    for step in SCENARIOS["sglang_ready"].steps:
        text = step.text.replace("{ts}", time.strftime("%Y-%m-%d %H:%M:%S"))
        for key, value in (
            ("{host}", host),
            ("{port}", str(port)),
            ("{pid}", str(os.getpid())),
            ("{model}", model),
        ):
            text = text.replace(key, value)
        sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main() -> None:
    host, port = argv_value("--host", "127.0.0.1"), int(argv_value("--port", "30000"))
    served = argv_value("--served-model-name", argv_value("--model-path", "model"))
    asyncio.run(serve(host, port, served))


if __name__ == "__main__":
    main()
