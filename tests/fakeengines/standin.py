"""The one stand-in server of the tests: an OpenAI-compatible engine whose every behaviour is
set by one config (`Config`, below), run either as a program or in the test's own process.

As a program it takes the engine's argv and reads its config as JSON from one variable:

    SPECPILOT_STANDIN='{"scenario": "sglang_ready", "answers": "echo"}' \
        python standin.py --model-path M --host 127.0.0.1 --port 30000 ...

It prints a start-up log (a scenario of scenarios.py, a recorded log replayed, or SGLang's
ready lines for a speed profile), binds the port where the engine does, answers as configured
and ends as the engine would (exit code, SIGKILL of its own group, serving, or hanging).
In a test, `StandIn(faults).start()` serves the same answers from a background thread on
127.0.0.1, with counters a test can read and `stop()`/`start()` on the same port.

Answers (`Config.answers`), each a pure function of the request so a test can recompute it:
  "echo"     `answer_for(prompt)`, with the faults of `Faults` (latency, 429 bursts, 500s,
             dropped connections, 503 storms, `TOO-LONG` prompts refused with a 400, prompts
             holding `cut_marker` (or `cut_share` of all prompts) cut at max_tokens, their
             completion_tokens then max_tokens, inline or separate reasoning)
  "never"    a request is never answered (the engine died under it): the client waits
  "scripted" markers in the prompt: `HOLD` waits for `release()`, `TOO-LONG` gets a 400,
             `RETRY` one 429 first (shared by stand-ins through `retried`), `EMPTY` empty content;
             completion lengths follow the prompt's last number (`completion_tokens_for`)
  "batch"    a batch loop whose speed and acceptance follow the argv through `Config.profiles`
             (keyed by draft tokens, --speculative-num-steps; 0 without speculation):
             every `step_s` each of the first min(cap, --max-running-requests) requests gets
             `accept` tokens on average; streaming or not. Optional per profile:
             "step_per_request_s", "graph_max_bs" and "eager_factor", "adaptive_from" (with
             --speculative-adaptive), "prefill_s", "prefill_eager_factor",
             "prefill_graph_to_fraction" (the prefill graph is captured when
             --mem-fraction-static is at most this and --disable-prefill-cuda-graph is absent),
             "die": <scenario> (that scenario is played instead: a start that fails),
             "die_at_request": N (exit 1 as the Nth chat request arrives), "setsid_child": FILE.
`/metrics` (`Config.metrics`): "vllm" speculative-decoding counters, generated tokens and the
"echo" requests running, "sglang" the acceptance gauge, "none" 404. `/get_server_info` is
served with "batch" (avg_spec_accept_length).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import SCENARIOS, Scenario, Step

CONFIG_ENV = "SPECPILOT_STANDIN"
ACCEPTED_PER_DRAFT = 2.5  # "vllm" /metrics reports mean acceptance length 1 + 2.5 = 3.5
ACCEPT_LENGTH = 2.75  # "sglang" /metrics outside "batch"
FATAL_MARKER = "TOO-LONG"
CUT_MARKER = "CUT-OFF"  # answered with finish_reason "length"
SURROGATE_MARKER = "LONE-SURROGATE"  # answered with content holding a lone "\\ud800" escape
REPLAY_READY = "The server is fired up and ready to roll"
#: SGLang 0.5.23's default batch size from which adaptive speculation stops drafting
ADAPTIVE_FROM = 64
#: multiprocessing.resource_tracker's main() ignores SIGINT and SIGTERM
#: (https://github.com/python/cpython/blob/main/Lib/multiprocessing/resource_tracker.py)
_STUBBORN = "import signal, time\nfor s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\nwhile True: time.sleep(1)"
_SLEEPER = "import time\nwhile True: time.sleep(1)"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Faults:
    """How "echo" answers misbehave."""

    latency_s: float = 0.0
    burst_429_every: int = 0  # every Nth request starts a burst of 429s ...
    burst_429_length: int = 3  # ... this many long
    retry_after: str = "0"  # the 429s' Retry-After header, as sent (seconds, a date, or anything)
    error_500_rate: float = 0.0
    drop_rate: float = 0.0
    reasoning_field: str = "reasoning_content"  # or vLLM's newer "reasoning"
    #: no reasoning parser: "" (the server has one), "think" (`<think>\nR\n</think>\n\nA` in
    #: content), "closing" (Qwen3.5/3.6: the prompt opened `<think>`, so only `R\n</think>\n\nA`),
    #: "none" (a model that does not think: content only)
    inline_thinking: str = ""
    cut_marker: str = CUT_MARKER  # prompts holding it are answered as cut at max_tokens
    #: cut_marker prompts are answered in full when max_tokens is at least this (0: never)
    cut_unless_max_tokens: int = 0
    #: this share of every prompt is cut as cut_marker prompts are (`is_cut_share`: a pure function)
    cut_share: float = 0.0
    storm_503: int = 0  # the first N requests, chat and /health alike, get 503 (an engine restarting)
    seed: int = 7
    #: a tokenizer.json: usage.completion_tokens counts with it what a Qwen3.5-style model writes
    #: after the `<think>\n` of its prompt, `R\n</think>\n\nA<|im_end|>` (without thinking
    #: `A<|im_end|>`), as an engine counts its output; None: 4
    tokenizer: str | None = None


@dataclass
class Config:
    """Everything a stand-in does; as a program, the JSON of this record in SPECPILOT_STANDIN."""

    #: start-up: a scenario's lines and end; or `replay`, recorded logs keyed by the
    #: --mem-fraction-static value (printed up to the ready line, then served; a log without
    #: one is printed whole and ends in exit 1); "batch" plays "sglang_ready" unless its
    #: profile says "die"
    scenario: str | None = None
    replay: dict[str, str] = field(default_factory=dict)
    answers: str = "never"  # "never" | "echo" | "scripted" | "batch" (module docstring)
    faults: Faults = field(default_factory=Faults)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # "batch" speed per draft tokens
    metrics: str = "none"  # "none" | "vllm" | "sglang" ("batch" serves its own)
    served_name: str | None = None  # /v1/models' id; None: --served-model-name or --model-path
    max_model_len: int | None = None  # /v1/models' context in tokens, as vLLM and SGLang list it
    #: readiness: while this file exists, /health and /v1/models answer only after 30 s
    busy_file: str | None = None
    # death triggers
    die_after_answers: int | None = None  # print the scenario's after_ready lines, SIGKILL the group
    die_once_file: str | None = None  # ... only while absent (then written; "{port}": our port)
    die_unless_flag: str | None = None  # ... not when argv holds this flag
    trigger_file: str | None = None  # once it exists, the scenario's after_ready lines are printed
    #: after this many answers every chat request hangs, the process alive and /health answering
    #: (a hung collective, a deadlocked scheduler) ...
    stall_after_answers: int | None = None
    stall_once_file: str | None = None  # ... only while absent (then written; "{port}": our port)
    #: "echo" answers quote the engine's --api-key (a server echoing a key into an answer)
    echo_api_key: bool = False
    mark_file: str | None = None  # time.time() of the fatal line; <file>.ended at the stand-in's own end
    linger_s: float = 0.0  # stay alive this long after the last line
    orphan: bool = False  # before ending, SIGKILL our parent (the launch watcher): we end a zombie
    # helpers
    stubborn_child_file: str | None = None  # a helper ignoring SIGTERM (vLLM's resource_tracker); its pid
    setsid_child_file: str | None = None  # a helper in its own session (a daemonised worker); its pid
    starts_file: str | None = None  # each start appends its pid here: what a test finds still running

    @classmethod
    def from_json(cls, text: str) -> Config:
        data = json.loads(text)
        return cls(**{**data, "faults": Faults(**data.get("faults", {}))})


def config_env(**config: Any) -> dict[str, str]:
    """The engine env that starts the program with this config (Config's fields as keywords)."""
    faults = config.get("faults", {})
    Config(**{**config, "faults": Faults(**faults)})  # a wrong key fails here, in the test
    return {CONFIG_ENV: json.dumps(config)}


def answer_for(prompt: str) -> tuple[str, str]:
    """(content, reasoning) "echo" gives for a prompt: tests recompute it."""
    return f"answer: {prompt}", f"thinking about {prompt}"


def is_cut_share(prompt: str, share: float) -> bool:
    """Whether "echo" with `Faults.cut_share` cuts this prompt: its hash falls in the share."""
    digest = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    return digest % 10_000 < share * 10_000


def completion_tokens_for(prompt: str) -> int:
    """ "scripted" completion tokens: a function of the prompt's last number, for a histogram."""
    number = int(prompt.split()[-1])
    return 5 + (number * 37) % 200


def _tokens_written(tokenizer: str, content: str, reasoning: str, thinking: bool) -> int:
    """The tokens a Qwen3.5-style model writes for this answer (`Faults.tokenizer`)."""
    from tokenizers import Tokenizer

    written = f"{reasoning}\n</think>\n\n{content}" if thinking else content
    return len(Tokenizer.from_file(tokenizer).encode(written + "<|im_end|>", add_special_tokens=False).ids)


@dataclass
class Counts:
    requests: int = 0
    answered: int = 0
    rate_limited: int = 0
    errors_500: int = 0
    dropped: int = 0
    running: int = 0  # "echo" chat requests not yet answered (a stalled one stays running)
    per_prompt: Counter[str] = field(default_factory=Counter)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # every answered request
    authorization: set[str] = field(default_factory=set)  # the Authorization headers seen


# --- "batch": speed follows the argv ---


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
class _Job:
    target: int
    finish: str
    chunks: asyncio.Queue[tuple[int, str | None]] = field(default_factory=asyncio.Queue)
    sent: int = 0


@dataclass
class Batch:
    profiles: dict[str, Any]
    steps: int
    adaptive: bool
    running_limit: int
    speculative: bool
    die_at_request: int | None = None
    graph: bool = True
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    waiting: list[_Job] = field(default_factory=list)
    verify_steps: int = 0
    tokens: int = 0

    async def loop(self) -> None:
        while True:
            running = self.waiting[: self.running_limit]
            profile = profile_at(self.profiles, self.steps, self.adaptive, max(1, len(running)))
            joining = sum(1 for r in running if r.sent == 0)
            await asyncio.sleep(step_seconds(profile, len(running), joining, self.graph))
            accept = float(profile["accept"])
            for job in running:
                whole = int(accept)
                count = whole + (1 if self.rng.random() < accept - whole else 0)
                count = min(max(count, 1), job.target - job.sent)
                job.sent += count
                self.verify_steps += 1
                self.tokens += count
                job.chunks.put_nowait((count, job.finish if job.sent >= job.target else None))
            self.waiting = [r for r in self.waiting if r.sent < r.target]

    def accept_length(self) -> float | None:
        return round(self.tokens / self.verify_steps, 3) if self.speculative and self.verify_steps else None


def _batch_target(messages: Any, max_tokens: int) -> tuple[int, str]:
    """How long the answer to these messages is: a pure function of the prompt."""
    digest = int(hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest(), 16)
    if digest % 3 == 0:
        return max_tokens, "length"
    return max(1, int(max_tokens * (0.4 + 0.5 * (digest % 100) / 100))), "stop"


# --- the HTTP side, one app for every mode ---


class Server:
    """The routes and their state; `argv` is the engine's (empty in-process)."""

    def __init__(self, config: Config, argv: argparse.Namespace, retried: set[str] | None = None) -> None:
        self.config = config
        self.faults = config.faults
        self.argv = argv
        self.served = config.served_name or argv.served_model_name or argv.model
        self.counts = Counts()
        self.batch: Batch | None = None
        self.chat_requests = 0
        self._random = random.Random(self.faults.seed)
        self._burst_left = 0
        self._drafts = 0
        self._retried = retried if retried is not None else set()
        self.stalled = asyncio.Event()  # set: chat requests hang (Config.stall_after_answers)
        self.gate = asyncio.Event()  # "scripted" HOLD prompts and stalled "echo" requests wait on it

    def app(self, routes: dict[str, Handler] | None = None) -> web.Application:
        """The routes of the config; `routes` (in-process) replace those of their paths, and a
        "*" entry answers every request alone."""
        routes = routes or {}
        app = web.Application(middlewares=[self._authorized])
        if "*" in routes:
            app.router.add_route("*", "/{tail:.*}", routes["*"])
            return app
        served: list[tuple[str, str, Handler]] = [
            ("POST", "/v1/chat/completions", self._chat),
            ("GET", "/v1/models", self._models),
            ("GET", "/health", self._health),
        ]
        if self.config.answers == "batch":
            served.append(("GET", "/get_server_info", self._server_info))
        if self.config.answers == "batch" or self.config.metrics != "none":
            served.append(("GET", "/metrics", self._metrics))
        for method, path, handler in served:
            app.router.add_route(method, path, routes.get(path, handler))
        return app

    @web.middleware
    async def _authorized(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """With a key (--api-key, or VLLM_API_KEY as vLLM reads it) every path but /health and
        /metrics wants it as the bearer token, as SGLang's and vLLM's API-key middleware do."""
        key = self.argv.api_key or os.environ.get("VLLM_API_KEY")
        guarded = request.path not in ("/health", "/metrics")
        if key is not None and guarded and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def _wait_if_busy(self) -> None:
        busy = self.config.busy_file
        if busy and Path(busy).exists():
            await asyncio.sleep(30)

    def _in_storm(self) -> bool:
        if self.faults.storm_503 <= 0:
            return False
        self.faults.storm_503 -= 1
        return True

    async def _health(self, request: web.Request) -> web.Response:
        await self._wait_if_busy()
        if self._in_storm():
            return web.Response(status=503, text="")
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        await self._wait_if_busy()
        model: dict[str, Any] = {"id": self.served}
        if self.config.max_model_len is not None:
            model["max_model_len"] = self.config.max_model_len
        return web.json_response({"object": "list", "data": [model]})

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.batch is not None:
            running = min(len(self.batch.waiting), self.batch.running_limit)
            lines = [f'sglang:num_running_reqs{{model_name="{self.served}"}} {running}']
            if self.batch.accept_length() is not None:
                lines.append(
                    f'sglang:spec_accept_length{{model_name="{self.served}"}} {self.batch.accept_length()}'
                )
            return web.Response(text="\n".join(lines) + "\n")
        if self.config.metrics == "sglang":
            return web.Response(
                text=f"# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length {ACCEPT_LENGTH}\n"
            )
        accepted = self._drafts * ACCEPTED_PER_DRAFT
        text = (
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f'vllm:spec_decode_num_drafts_total{{model_name="{self.served}"}} {self._drafts}\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{self.served}"}} '
            f"{accepted}\n"
            f'vllm:generation_tokens_total{{model_name="{self.served}"}} {self._drafts * 4}\n'
            f'vllm:num_requests_running{{model_name="{self.served}"}} {self.counts.running}\n'
        )
        return web.Response(text=text)

    async def _server_info(self, request: web.Request) -> web.Response:
        state: dict[str, object] = {"last_gen_throughput": 0.0}
        if self.batch is not None and self.batch.accept_length() is not None:
            state["avg_spec_accept_length"] = self.batch.accept_length()
        return web.json_response({"version": "0.5.13", "internal_states": [state]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        answers = self.config.answers
        if answers == "never":
            await asyncio.sleep(3600)  # a request the engine never answers (it died): the client waits
            return web.Response(status=500)
        if answers == "batch":
            return await self._batch_chat(request)
        if answers == "scripted":
            return await self._scripted_chat(request)
        self.counts.running += 1
        try:
            return await self._echo_chat(request)
        finally:
            self.counts.running -= 1

    async def _echo_chat(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        if self.stalled.is_set():
            await self.gate.wait()  # hung: never answered (in-process, until `release()` at close)
        faults, counts = self.faults, self.counts
        counts.requests += 1
        counts.authorization.add(request.headers.get("Authorization", ""))
        number = counts.requests
        if faults.latency_s:
            await asyncio.sleep(faults.latency_s)
        if self._in_storm():
            return web.json_response({"error": "Service Unavailable"}, status=503)
        if faults.burst_429_every and number % faults.burst_429_every == 0:
            self._burst_left = faults.burst_429_length
        if self._burst_left > 0:
            self._burst_left -= 1
            counts.rate_limited += 1
            return web.json_response(
                {"error": "slow down"}, status=429, headers={"Retry-After": faults.retry_after}
            )
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
        if self.config.echo_api_key:
            content += f" (the server's key is {self.argv.api_key or os.environ.get('VLLM_API_KEY')})"
        if SURROGATE_MARKER in prompt:
            content += "\ud800"  # valid JSON on the wire (json_response escapes it), not valid text
        message: dict[str, Any] = {"role": "assistant", "content": content}
        inline = faults.inline_thinking
        if thinking and not inline:
            message[faults.reasoning_field] = reasoning
        elif thinking and inline != "none":
            opening = "<think>\n" if inline == "think" else ""
            message["content"] = f"{opening}{reasoning}\n</think>\n\n{content}"
        budget = body.get("max_tokens") or 0
        cut = (faults.cut_marker in prompt or is_cut_share(prompt, faults.cut_share)) and not (
            faults.cut_unless_max_tokens and budget >= faults.cut_unless_max_tokens
        )
        completion_tokens = budget if cut and budget else 4
        counts.answered += 1
        counts.per_prompt[prompt] += 1
        counts.bodies.append(body)
        self._drafts += 1
        self._die_if_due()
        self._stall_if_due()
        written = (
            completion_tokens
            if faults.tokenizer is None
            else _tokens_written(faults.tokenizer, content, reasoning, thinking)
        )
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "length" if cut else "stop"}],
                "usage": {
                    "prompt_tokens": len(prompt.split()),
                    "completion_tokens": written,
                    "total_tokens": len(prompt.split()) + written,
                },
            }
        )

    def _die_if_due(self) -> None:
        """`die_after_answers` and its conditions: the after_ready lines, then SGLang's
        kill_process_tree (our whole group, ourselves included)."""
        config = self.config
        if config.die_after_answers is None or self.counts.answered != config.die_after_answers:
            return
        if config.die_unless_flag and config.die_unless_flag in sys.argv:
            return
        if config.die_once_file:
            marker = Path(config.die_once_file.replace("{port}", str(self.argv.port)))
            if marker.exists():
                return
            marker.write_text(str(os.getpid()))
        scenario = SCENARIOS[config.scenario or "sglang_ready"]
        _print_steps(scenario.after_ready, {})
        os.killpg(os.getpgid(0), signal.SIGKILL)

    def _stall_if_due(self) -> None:
        """`stall_after_answers`: the requests after this answer hang (once, with `stall_once_file`)."""
        config = self.config
        if config.stall_after_answers is None or self.counts.answered != config.stall_after_answers:
            return
        if config.stall_once_file:
            marker = Path(config.stall_once_file.replace("{port}", str(self.argv.port)))
            if marker.exists():
                return
            marker.write_text(str(os.getpid()))
        self.stalled.set()

    async def _scripted_chat(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        prompt = str(body["messages"][-1]["content"])
        if "HOLD" in prompt:
            await self.gate.wait()
        if FATAL_MARKER in prompt:
            return web.json_response({"error": {"message": "maximum context length exceeded"}}, status=400)
        if "RETRY" in prompt and prompt not in self._retried:
            self._retried.add(prompt)
            return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "0"})
        self.counts.answered += 1
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

    async def _batch_chat(self, request: web.Request) -> web.StreamResponse:
        batch = self.batch
        assert batch is not None
        self.chat_requests += 1
        if batch.die_at_request is not None and self.chat_requests >= batch.die_at_request:
            print("Fatal: the engine died mid-measure", flush=True)
            os._exit(1)
        body = await request.json()
        target, finish = _batch_target(body.get("messages"), int(body.get("max_tokens") or 64))
        thinking = bool((body.get("chat_template_kwargs") or {}).get("enable_thinking"))
        job = _Job(target, finish)
        batch.waiting.append(job)
        prompt_tokens = len(json.dumps(body.get("messages"))) // 4
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": target,
            "total_tokens": prompt_tokens + target,
        }
        if not body.get("stream"):
            reasoning: list[str] = []
            content: list[str] = []
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
            event = {
                "id": "x",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {key: "tok " * count}, "finish_reason": end}],
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


# --- in the test's process ---


class StandIn:
    """Serve on 127.0.0.1 from a background thread (its own event loop)."""

    def __init__(
        self,
        faults: Faults | None = None,
        port: int = 0,
        *,
        config: Config | None = None,
        retried: set[str] | None = None,
        routes: dict[str, Handler] | None = None,
    ) -> None:
        """`faults` replace the config's; `retried`: prompts already refused once, shared by
        "scripted" stand-ins so a row gets one 429 in all; `routes`: a test's own answers for
        some paths (Server.app)."""
        config = config or Config(answers="echo", metrics="vllm", served_name="fake-model")
        config = replace(config, faults=faults or config.faults)
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.server = self._call(self._make_server(config, retried), 5)
        self._routes = routes
        self._runner: web.AppRunner | None = None

    @staticmethod
    async def _make_server(config: Config, retried: set[str] | None) -> Server:
        return Server(config, _parse_argv([]), retried)  # its Event belongs to this loop

    def _call(self, coroutine: Any, timeout_s: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def counts(self) -> Counts:
        return self.server.counts

    @property
    def answered(self) -> int:
        return self.server.counts.answered

    def start(self) -> StandIn:
        self._call(self._start(), 10)
        return self

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        self._call(self._stop(), 10)

    def release(self) -> None:
        """Let every "scripted" HOLD prompt be answered."""
        self._loop.call_soon_threadsafe(self.server.gate.set)

    def close(self) -> None:
        self.release()
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.server.app(self._routes), access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


# --- as the engine's process ---


def _parse_argv(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model-path", "--model", dest="model", default="model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--mem-fraction-static", default=None)
    parser.add_argument("--speculative-num-steps", type=int, default=0)
    parser.add_argument("--max-running-requests", type=int, default=1 << 30)
    parser.add_argument("--speculative-adaptive", action="store_true")
    parser.add_argument("--disable-prefill-cuda-graph", action="store_true")
    return parser.parse_known_args(argv)[0]


def _print_steps(steps: tuple[Step, ...], values: dict[str, str]) -> None:
    for step in steps:
        text = step.text.replace("{ts}", time.strftime("%Y-%m-%d %H:%M:%S"))
        for key, value in values.items():
            text = text.replace(key, value)
        sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _spawn(code: str, *, new_session: bool = False) -> int:
    """A helper process (in our group unless `new_session`); returns its pid."""
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.DEVNULL, start_new_session=new_session
    )
    return child.pid


def _orphan_self() -> None:
    """Lose the parent that would reap us; return once another process adopted us."""
    parent = os.getppid()
    os.kill(parent, signal.SIGKILL)
    while os.getppid() == parent:
        time.sleep(0.005)


def replayed(config: Config, mem_fraction: str | None) -> tuple[list[str], bool]:
    """The lines of the log recorded with this --mem-fraction-static ('#' lines are not the
    engine's), up to its ready line if it has one (what followed was the recording's own
    request and shutdown); and whether it reached ready."""
    lines = [line for line in Path(config.replay[mem_fraction or "default"]).read_text().splitlines()]
    lines = [line for line in lines if not line.startswith("#")]
    for index, line in enumerate(lines):
        if REPLAY_READY in line:
            return lines[: index + 1], True
    return lines, False


class Engine:
    """One engine process: its start-up log, its port and its end."""

    def __init__(self, config: Config, argv: argparse.Namespace) -> None:
        self.config = config
        self.argv = argv
        self.server = Server(config, argv)
        self.runner: web.AppRunner | None = None

    async def serve(self) -> None:
        if self.runner is None:
            self.runner = web.AppRunner(self.server.app(), access_log=None)
            await self.runner.setup()
            await web.TCPSite(self.runner, self.argv.host, self.argv.port).start()

    async def run(self) -> None:
        if self.config.replay:
            await self.replay()
        elif self.config.answers == "batch":
            await self.batch()
        elif self.config.scenario is None:  # a plain server: no start-up log, serving at once
            await self.serve()
            await asyncio.Event().wait()
        else:
            await self.play(SCENARIOS[self.config.scenario])

    async def replay(self) -> None:
        lines, ready = replayed(self.config, self.argv.mem_fraction_static)
        for line in lines:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            await asyncio.sleep(0.002)
        if not ready:
            os._exit(1)
        await self.serve()
        await asyncio.Event().wait()

    async def batch(self) -> None:
        args, profiles = self.argv, self.config.profiles
        profile = profiles[str(args.speculative_num_steps)]
        if "die" in profile:
            self.config = replace(self.config, answers="never")
            self.server = Server(self.config, args)
            await self.play(SCENARIOS[profile["die"]])
            return
        self.server.batch = Batch(
            profiles=profiles,
            steps=args.speculative_num_steps,
            adaptive=args.speculative_adaptive,
            running_limit=min(int(profile.get("cap", 1 << 30)), args.max_running_requests),
            speculative=args.speculative_num_steps > 0,
            die_at_request=profile.get("die_at_request"),
            graph=prefill_graph(
                profile,
                None if args.mem_fraction_static is None else float(args.mem_fraction_static),
                args.disable_prefill_cuda_graph,
            ),
        )
        if "setsid_child" in profile:
            Path(profile["setsid_child"]).write_text(str(_spawn(_SLEEPER, new_session=True)))
        # SGLang's ready lines, bound at "Uvicorn running"; no helper processes (they cost CPU)
        await self.play(replace(SCENARIOS["sglang_ready"], serve_before_ready=True, children=0))

    async def play(self, scenario: Scenario) -> None:
        config, args = self.config, self.argv
        values = {
            "{host}": args.host,
            "{port}": str(args.port),
            "{pid}": str(os.getpid()),
            "{model}": args.model,
            "{api_key}": repr(args.api_key),
            "{api_key_arg}": "" if args.api_key is None else f", 'api_key': [{args.api_key!r}]",
        }
        for _ in range(scenario.children):  # in our group, as SGLang's scheduler/detokenizer are
            _spawn(_SLEEPER)
        if config.setsid_child_file:
            Path(config.setsid_child_file).write_text(str(_spawn(_SLEEPER, new_session=True)))
        if config.stubborn_child_file:
            Path(config.stubborn_child_file).write_text(str(_spawn(_STUBBORN)))
        for step in scenario.steps:
            await asyncio.sleep(step.delay_s)
            if scenario.serve_before_ready and "Uvicorn running on" in step.text:
                await self.serve()
            _print_steps((step,), values)
            if step.fatal and config.mark_file:
                Path(config.mark_file).write_text(repr(time.time()))
        if self.server.batch is not None:
            await self.server.batch.loop()
        await asyncio.sleep(config.linger_s)
        if config.orphan:
            _orphan_self()
        if config.mark_file:
            Path(config.mark_file + ".ended").write_text(scenario.end)
        if scenario.end == "exit":
            os._exit(scenario.exit_code)
        if scenario.end == "sigkill":
            os.killpg(os.getpgid(0), signal.SIGKILL)  # SGLang's kill_process_tree, itself included
        if scenario.end == "serve":
            await self.serve()
        if scenario.after_ready and config.trigger_file:
            await self.crash_when_triggered(scenario.after_ready, Path(config.trigger_file))
        await asyncio.Event().wait()  # serve or hang until signalled

    async def crash_when_triggered(self, steps: tuple[Step, ...], trigger: Path) -> None:
        """Serve until the trigger file appears, then print the lines of a crash (and linger,
        as an engine whose API server outlives its dead core does)."""
        while not trigger.exists():
            await asyncio.sleep(0.02)
        for step in steps:
            await asyncio.sleep(step.delay_s)
            _print_steps((step,), {})
            if step.fatal and self.config.mark_file:
                Path(self.config.mark_file).write_text(repr(time.time()))


def main() -> None:
    config = Config.from_json(os.environ[CONFIG_ENV])
    if config.starts_file:
        with open(config.starts_file, "a") as starts:
            starts.write(f"{os.getpid()}\n")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(Engine(config, _parse_argv(sys.argv[1:])).run())


if __name__ == "__main__":
    main()
