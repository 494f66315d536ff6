"""A streaming chat client that answers like `generate`'s and times every token chunk.

`generate` sends non-streaming requests (less CPU per request); time to first token and
inter-token latency exist only in a stream, so the bench's sample goes through the same
job, dispatcher and writer with this client in place of `ChatClient` (`JobConfig.
client_factory`). Each request's timing goes to a `TimingLog`; the answer it returns is
the same `Answer` a non-streaming call gives, so rows, flags and the ledger are unchanged.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specpilot.generate.dispatch.client import (
    ERROR_BODY_CHARS,
    MAX_TOKEN_COUNT,
    ChatClient,
    FailureKind,
    RequestFailed,
    classify_status,
)
from specpilot.generate.rows.text import where_unencodable
from specpilot.generate.rows.types import Answer, Message
from specpilot.generate.sampling import Sampling

#: SSE framing of OpenAI-compatible streams (SGLang, vLLM)
DATA_PREFIX = b"data:"
DONE = b"[DONE]"


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One answered request, as SGLang's bench_serving records it: when it was sent, the
    time to its first token, the gaps between token chunks, and its output tokens."""

    start_s: float
    latency_s: float
    ttft_s: float
    itl_s: tuple[float, ...]
    output_tokens: int
    finish_reason: str | None
    #: the prompt's tokens as the server counted them (0: it did not say)
    prompt_tokens: int = 0


@dataclass
class TimingLog:
    """The timings of one variant's sample, in the order the requests finished."""

    requests: list[RequestTiming] = field(default_factory=list)
    failed: int = 0
    #: why the last request failed: a variant with no answer says it
    last_error: str | None = None


@dataclass
class _Stream:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    chunk_times_s: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)

    def feed(self, event: Any, now_s: float) -> None:
        if not isinstance(event, dict):
            raise RequestFailed(FailureKind.RETRYABLE, "malformed stream event (not an object)")
        if "error" in event:
            shown = json.dumps(event["error"])[:ERROR_BODY_CHARS]
            raise RequestFailed(FailureKind.RETRYABLE, f"the stream ended with an error: {shown}")
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        for choice in event.get("choices") or ():
            self._take(choice, now_s)

    def _take(self, choice: object, now_s: float) -> None:
        """One choice's delta: its text and reasoning, the chunk timed where it carries either."""
        if not isinstance(choice, dict) or not isinstance(delta := choice.get("delta"), dict):
            return
        text = _text(delta.get("content"))
        thought = _text(delta.get("reasoning_content") or delta.get("reasoning"))
        if text:
            self.content.append(text)
        if thought:
            self.reasoning.append(thought)
        if text or thought:
            self.chunk_times_s.append(now_s)
        if choice.get("finish_reason") is not None:
            self.finish_reason = str(choice["finish_reason"])

    def answer(self) -> Answer:
        """The streamed answer; a token count out of range or text no part file can hold (a lone
        surrogate) is a malformed answer, as in a non-streamed one."""
        usage = self.usage
        _check_counts(usage)
        kept = {"content": "".join(self.content), "reasoning": "".join(self.reasoning)}
        unencodable = where_unencodable(kept)
        if unencodable:
            raise RequestFailed(
                FailureKind.RETRYABLE, f"malformed stream ({unencodable} is a lone surrogate, not text)"
            )
        completion_tokens = _count(usage.get("completion_tokens"))
        if completion_tokens is None:  # a server without include_usage: one token per chunk
            completion_tokens = len(self.chunk_times_s)
        details = usage.get("completion_tokens_details")
        reasoning_tokens = _count(details.get("reasoning_tokens")) if isinstance(details, dict) else None
        return Answer(
            content="".join(self.content),
            reasoning="".join(self.reasoning) if self.reasoning else None,
            finish_reason=self.finish_reason,
            prompt_tokens=_count(usage.get("prompt_tokens")) or 0,
            completion_tokens=completion_tokens,
            spec_accept_length=_accept_length(usage.get("spec_accept_length")),
            reasoning_tokens=reasoning_tokens,
            usage_missing=not usage,
        )


def _text(value: object) -> str:
    """A delta's text; "" where it carries none (or no string)."""
    return value if isinstance(value, str) else ""


def _check_counts(usage: dict[str, Any]) -> None:
    """A token count no answer can reach makes the stream malformed."""
    for key in ("prompt_tokens", "completion_tokens"):
        count = usage.get(key)
        if isinstance(count, int) and count > MAX_TOKEN_COUNT:
            raise RequestFailed(
                FailureKind.RETRYABLE,
                f"malformed stream (usage.{key} is {count}, more than any answer holds)",
            )


def _accept_length(value: object) -> float | None:
    """SGLang's mean acceptance length of the request, where it reports a positive one."""
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class StreamingChatClient(ChatClient):
    """`ChatClient` with `"stream": true`; each answered request is timed into `log`."""

    def __init__(
        self, session: aiohttp.ClientSession, model: str, sampling: Sampling, log: TimingLog
    ) -> None:
        super().__init__(session, model, sampling)
        fixed = {**sampling.request_body(model), "stream": True, "stream_options": {"include_usage": True}}
        self._body_prefix = json.dumps(fixed, separators=(",", ":"))[:-1].encode() + b',"messages":'
        self.log = log

    def failed(
        self, kind: FailureKind, message: str, retry_after_s: float | None = None, status: int | None = None
    ) -> RequestFailed:
        failure = super().failed(kind, message, retry_after_s, status)
        self.log.last_error = str(failure)
        return failure

    async def complete(
        self, base_url: str, messages: Sequence[Message], tools: Sequence[Any] | None = None
    ) -> Answer:
        url, headers = self.target(base_url)
        stream = _Stream()
        start_s = time.monotonic()
        try:
            async with self._session.post(url, data=self.body(messages, tools), headers=headers) as response:
                if response.status != 200:
                    raw = await response.read()
                    text = raw[:ERROR_BODY_CHARS].decode("utf-8", "replace")
                    self.log.failed += 1
                    raise self.failed(
                        classify_status(response.status, raw), f"HTTP {response.status}: {text}"
                    )
                await self._read_stream(response, stream)
        except (TimeoutError, aiohttp.ServerTimeoutError):
            self.log.failed += 1
            raise RequestFailed(FailureKind.TIMEOUT, "request timed out") from None
        except aiohttp.ClientError as err:
            self.log.failed += 1
            raise self.failed(
                FailureKind.CONNECTION, f"connection failed: {type(err).__name__}: {err}"
            ) from None
        end_s = time.monotonic()
        try:
            answer = stream.answer()
        except RequestFailed as err:
            self.log.failed += 1
            raise self.failed(err.kind, str(err)) from None
        self._record(start_s, end_s, stream.chunk_times_s, answer)
        return answer

    async def _read_stream(self, response: aiohttp.ClientResponse, stream: _Stream) -> None:
        """Feed every `data:` event to `stream`, timed as it arrives; a reply with none is refused."""
        events = 0
        async for line in response.content:
            payload = line.strip()
            if not payload.startswith(DATA_PREFIX):
                continue
            events += 1
            payload = payload[len(DATA_PREFIX) :].strip()
            if payload == DONE:
                break
            try:
                event = json.loads(payload)
            except (ValueError, RecursionError):
                raise self.failed(
                    FailureKind.RETRYABLE,
                    "malformed stream event: " + payload[:ERROR_BODY_CHARS].decode("utf-8", "replace"),
                ) from None
            try:
                stream.feed(event, time.monotonic())
            except RequestFailed as err:  # it quotes the event
                raise self.failed(err.kind, str(err)) from None
        if not events:
            self.log.failed += 1
            raise self.failed(
                FailureKind.FATAL,
                f"the server answered without streaming (Content-Type "
                f"{response.headers.get('Content-Type', 'none')}, no 'data:' events): it ignores "
                '"stream": true, and the bench times a stream\'s tokens',
            )

    def _record(self, start_s: float, end_s: float, chunk_times_s: list[float], answer: Answer) -> None:
        """Log the answered request's timings (no chunk timed: the whole answer came at its end)."""
        times = chunk_times_s or [end_s]
        self.log.requests.append(
            RequestTiming(
                start_s=start_s,
                latency_s=end_s - start_s,
                ttft_s=times[0] - start_s,
                itl_s=tuple(later - earlier for earlier, later in itertools.pairwise(times)),
                output_tokens=answer.completion_tokens,
                finish_reason=answer.finish_reason,
                prompt_tokens=answer.prompt_tokens,
            )
        )
