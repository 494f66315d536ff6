"""One non-streaming `/v1/chat/completions` call over aiohttp, and what its failure means.

The request body's constant part (model, sampling, `chat_template_kwargs`) is encoded
once; per request only the messages are serialised. That and aiohttp's keep-alive pool
keep the driver's CPU cost per request small (see bench/generate_overhead.py).

Failures are classified by data (`RETRYABLE_STATUSES`), not by branches scattered
through the job: connection errors, timeouts, 408/409/425/429 and 5xx are worth a retry;
any other 4xx (context too long, bad request) cannot succeed and fails the row at once.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from enum import Enum
from typing import Any

import aiohttp
import yarl

from specpilot.errors import UserError
from specpilot.generate.rows.text import may_hold_surrogates, where_unencodable
from specpilot.generate.rows.thinking import markers_for, split_inline
from specpilot.generate.rows.types import Answer, Message
from specpilot.generate.sampling import Sampling
from specpilot.secrets import field_secrets, mask_log_text, replace_secrets, url_passwords

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, *range(500, 600)})
API_KEY_ENV = "SPECPILOT_API_KEY"
#: what SGLang's and vLLM's --api-key answer a request without the key (or with another)
UNAUTHORIZED_STATUSES = (401, 403)
#: the fix of a server answering those
KEY_FIX = f"set ${API_KEY_ENV} to the --api-key the server was started with"


def auth_headers(base_url: str, api_key: str | None) -> dict[str, str]:
    """The Authorization header of a request to `base_url`: the API key as a bearer token,
    unless the URL carries user:password (its own Basic auth; aiohttp refuses both)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key and not yarl.URL(base_url).user else {}


ERROR_BODY_CHARS = 300
#: the largest token count an answer may report: more than any context holds (2**31 - 1), and a
#: count past SQLite's 64-bit integers once crashed the ledger; a larger one is a malformed answer
MAX_TOKEN_COUNT = 2**31 - 1
# Where engines put a per-request acceptance figure: (path, kind). "length" is the mean
# accepted length itself; "verify_ct" is SGLang's count of verify passes, from which
# length = completion_tokens / verify passes.
SPEC_FIELDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("usage", "spec_accept_length"), "length"),
    (("meta_info", "spec_accept_length"), "length"),
    (("meta_info", "spec_verify_ct"), "verify_ct"),
    (("usage", "spec_verify_ct"), "verify_ct"),
)


class FailureKind(Enum):
    CONNECTION = "connection"  # the server did not answer at all: maybe down
    TIMEOUT = "timeout"
    RETRYABLE = "retryable"  # answered, but try again later
    FATAL = "fatal"  # answered, and this row cannot succeed


class RequestFailed(Exception):
    """A request that did not produce an answer; `kind` says what to do about it."""

    def __init__(
        self, kind: FailureKind, message: str, retry_after_s: float | None = None, status: int | None = None
    ):
        super().__init__(message)
        self.kind = kind
        self.retry_after_s = retry_after_s
        self.status = status  # the HTTP status, when the server answered

    @property
    def server_fault(self) -> bool:
        """The server, not the row, is failing: no answer, a timeout or a 5xx."""
        return self.kind in (FailureKind.CONNECTION, FailureKind.TIMEOUT) or (self.status or 0) >= 500


#: answers that mean "nobody can serve this now", not "this row failed": an smg router
#: with no healthy worker (503 no_available_workers). Handled like a server that is down:
#: the row goes back to the queue and no attempt is spent.
NO_WORKER_MARKERS = (b'"no_available_workers"',)


def classify_status(status: int, body: bytes = b"") -> FailureKind:
    if status == 503 and any(marker in body for marker in NO_WORKER_MARKERS):
        return FailureKind.CONNECTION
    return FailureKind.RETRYABLE if status in RETRYABLE_STATUSES else FailureKind.FATAL


#: request fields specpilot sets itself: an --extra-body that sets one is refused
OWNED_FIELDS = ("messages", "model", "stream", "stream_options", "tools", "n")


class _NotFinite(ValueError):
    """A number strict JSON cannot hold (`NaN`, `Infinity`, `1e999`)."""


def _finite_float(text: str) -> float:
    if not math.isfinite(value := float(text)):
        raise _NotFinite(text)
    return value


def _no_constant(text: str) -> float:
    raise _NotFinite(text)


def extra_body(text: str) -> dict[str, Any]:
    """--extra-body: a JSON object of request fields; one line naming what is wrong otherwise."""
    try:
        value = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except _NotFinite as err:
        # Python's json reads them, but the request body would not be JSON a server parses
        raise UserError(
            f"holds {err}, which is not a finite number",
            field="--extra-body",
            fix="give a finite number (strict JSON has no NaN or Infinity)",
        ) from None
    except ValueError as err:
        raise UserError(
            f"is not valid JSON ({err})",
            field="--extra-body",
            fix="""give a JSON object, e.g. '{"ignore_eos": false}'""",
        ) from None
    if not isinstance(value, dict):
        raise UserError(
            f"is {type(value).__name__} JSON, not an object",
            field="--extra-body",
            fix="""give a JSON object of request fields, e.g. '{"repetition_penalty": 1.05}'""",
        )
    kwargs = value.get("chat_template_kwargs", {})
    if not isinstance(kwargs, dict):
        raise UserError(
            f"sets chat_template_kwargs to {type(kwargs).__name__} JSON, not an object",
            field="--extra-body",
            fix="""give an object of template arguments, e.g. '{"chat_template_kwargs": {"x": 1}}'""",
        )
    if "enable_thinking" in kwargs:
        # --thinking decides it (and every row records it): a second say would be dropped or lied about
        raise UserError(
            f"sets chat_template_kwargs.enable_thinking to {json.dumps(kwargs['enable_thinking'])}, "
            "which --thinking/--no-thinking sets",
            field="--extra-body",
            fix="drop it from --extra-body and pass --no-thinking (or --thinking, the default)",
        )
    owned = sorted(set(value) & set(OWNED_FIELDS))
    if owned:
        raise UserError(
            f"sets {', '.join(owned)}, which specpilot sets itself",
            field="--extra-body",
            fix="drop them (the prompt rows give the messages, --model the model; nothing is streamed)",
        )
    return value


CONNECT_TIMEOUT_S = 10.0


def open_session(connections_per_server: int) -> aiohttp.ClientSession:
    """A keep-alive session tuned for many small JSON calls (no cookies, no compression).

    It has no per-request timer (arming and cancelling one costs ~10 us a request, 5-10%
    of the whole per-request CPU); the job's watchdog enforces the request timeout
    instead, and only new connections get a connect timeout.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=connections_per_server),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
    )


class ChatClient:
    """Sends chat completions for one job over a shared aiohttp session.

    URLs are parsed once per server; the request timeout is the caller's (see
    `open_session`).
    """

    def __init__(self, session: aiohttp.ClientSession, model: str, sampling: Sampling) -> None:
        self._session = session
        self._markers = markers_for(model)
        self._thinking = sampling.thinking
        fixed = json.dumps(sampling.request_body(model), separators=(",", ":"))
        self._body_prefix = fixed[:-1].encode() + b',"messages":'
        self._urls: dict[str, tuple[yarl.URL, dict[str, str]]] = {}
        self._plain_headers = {"Content-Type": "application/json"}
        self._headers = dict(self._plain_headers)
        api_key = os.environ.get(API_KEY_ENV)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        #: what a server may quote back in an error (the key, --extra-body's api_key, a URL's
        #: password): masked in every failure message, which the ledger, errors.jsonl, the page
        #: and the job's output show
        self._secrets = [*([api_key] if api_key else []), *field_secrets(dict(sampling.request_fields))]
        #: exact secret values a server echoed into answers, replaced (`secrets.replace_secrets`)
        self.secrets_replaced = 0
        #: answers 401/403: the server wants an API key this job did not send (or another one)
        self.unauthorized = 0

    def authorize(self, api_key: str) -> None:
        """Send `api_key` as the bearer token (the key `specpilot job` started its server with)."""
        self._headers["Authorization"] = f"Bearer {api_key}"
        self._urls.clear()  # built with the old headers
        self.know([api_key])

    def know(self, secrets: Sequence[str]) -> None:
        """More secret values (the job's server spec's): masked in failures, replaced in answers."""
        self._secrets += [value for value in secrets if value not in self._secrets]

    def failed(
        self, kind: FailureKind, message: str, retry_after_s: float | None = None, status: int | None = None
    ) -> RequestFailed:
        """A `RequestFailed` whose message (a server's words) holds no credential."""
        return RequestFailed(kind, mask_log_text(message, self._secrets), retry_after_s, status)

    def body(self, messages: Sequence[Message], tools: Sequence[Any] | None = None) -> bytes:
        encoded = json.dumps(messages, ensure_ascii=False, separators=(",", ":"))
        if tools:
            encoded += ',"tools":' + json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
        return self._body_prefix + encoded.encode() + b"}"

    def target(self, base_url: str) -> tuple[yarl.URL, dict[str, str]]:
        """The chat URL of a server and the headers to send it (built once per server)."""
        target = self._urls.get(base_url)
        if target is None:
            url = yarl.URL(f"{base_url}/v1/chat/completions")
            if url.password:  # sent as Basic auth: a server may quote either form back
                basic = base64.b64encode(f"{url.user or ''}:{url.password}".encode()).decode()
                self._secrets += [*url_passwords(base_url), basic]
            # a URL's user:password is its Authorization (aiohttp refuses both at once)
            target = self._urls[base_url] = (url, self._plain_headers if url.user else self._headers)
        return target

    async def complete(
        self, base_url: str, messages: Sequence[Message], tools: Sequence[Any] | None = None
    ) -> Answer:
        url, headers = self.target(base_url)
        try:
            body = self.body(messages, tools)
            async with self._session.post(url, data=body, headers=headers) as response:
                raw = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise RequestFailed(FailureKind.TIMEOUT, "request timed out") from None
        except aiohttp.ClientError as err:
            raise self.failed(
                FailureKind.CONNECTION, f"connection failed: {type(err).__name__}: {err}"
            ) from None
        if status != 200:
            self.unauthorized += status in UNAUTHORIZED_STATUSES
            text = raw[:ERROR_BODY_CHARS].decode("utf-8", "replace")
            raise self.failed(
                classify_status(status, raw[:ERROR_BODY_CHARS]),
                f"HTTP {status}: {text}",
                retry_after_s(retry_after),
                status,
            )
        try:
            answer = parse_answer(raw)
        except RequestFailed as err:  # it quotes the body
            raise self.failed(err.kind, str(err)) from None
        if self._secrets:
            answer = self._without_secrets(answer)
        if self._markers is None or (answer.reasoning or "").strip():
            return answer
        split = split_inline(answer.content, answer.finish_reason, self._markers, thinking=self._thinking)
        if split is None:
            return answer
        return replace(answer, reasoning=split[0], content=split[1], reasoning_split=True)

    def _without_secrets(self, answer: Answer) -> Answer:
        """The answer with every exact secret value it echoes replaced (counted): a key the server
        quotes back must not reach the rows written and the exports."""
        content, in_content = replace_secrets(answer.content, self._secrets)
        reasoning, in_reasoning = replace_secrets(answer.reasoning or "", self._secrets)
        tool_calls = answer.tool_calls
        in_tools = 0
        if tool_calls:
            text, in_tools = replace_secrets(json.dumps(tool_calls, ensure_ascii=False), self._secrets)
            tool_calls = json.loads(text) if in_tools else tool_calls
        replaced = in_content + in_reasoning + in_tools
        if not replaced:
            return answer
        self.secrets_replaced += replaced
        kept_reasoning = reasoning if answer.reasoning is not None else None
        return replace(answer, content=content, reasoning=kept_reasoning, tool_calls=tool_calls)


#: the longest wait a server's Retry-After may ask of a row: one asking for a day (or a date a
#: day off) is asked again after this, and --give-up-after-s ends a job it never stops asking
RETRY_AFTER_CAP_S = 60.0
#: the wait for a Retry-After that is neither seconds nor an HTTP date (or is negative)
RETRY_AFTER_DEFAULT_S = 1.0


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """A Retry-After header as seconds to wait, at most RETRY_AFTER_CAP_S: delay-seconds
    (`120`) or an HTTP date (a past one: 0); a negative or unreadable one: the default."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return RETRY_AFTER_DEFAULT_S
        if when.tzinfo is None:  # HTTP dates are GMT: one without a zone is read so
            when = when.replace(tzinfo=datetime.UTC)
        seconds = max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))
    if not math.isfinite(seconds) or seconds < 0:
        return RETRY_AFTER_DEFAULT_S
    return min(seconds, RETRY_AFTER_CAP_S)


class _Malformed(Exception):
    """A response body whose shape is not an OpenAI chat completion."""


def parse_answer(raw: bytes) -> Answer:
    """Read an OpenAI-style response; both `reasoning_content` and vLLM's `reasoning`.

    Every field is checked for its type: a server answering 200 with another shape
    (`"message": "hello"`, `"usage": "lots"`) or text holding a lone surrogate is a
    retryable malformed response, never an exception that would leave the row in flight.
    """
    try:
        data = json.loads(raw)
        choice = _first_choice(data)
        message = _field(choice, "message", dict)
        content = _optional(message, "content", str)
        reasoning = _reasoning(message)
        usage_given = _optional(data, "usage", dict)
        usage = usage_given or {}
        completion_tokens = _optional(usage, "completion_tokens", int) or 0
        prompt_tokens = _optional(usage, "prompt_tokens", int) or 0
        finish_reason = _optional(choice, "finish_reason", str)
        details = _optional(usage, "completion_tokens_details", dict) or {}
        reasoning_tokens = _optional(details, "reasoning_tokens", int)
        tool_calls = _optional(message, "tool_calls", list)
        _check_encodable(raw, {"content": content, "reasoning": reasoning, "tool_calls": tool_calls})
    except (ValueError, RecursionError, _Malformed) as err:
        raise _malformed(raw, err) from None
    return Answer(
        content=content or "",
        reasoning=reasoning,
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        spec_accept_length=_spec_accept_length(data, completion_tokens),
        reasoning_tokens=reasoning_tokens,
        tool_calls=tool_calls or None,
        usage_missing=usage.get("completion_tokens") is None,  # none, `{}` or no count: 0 recorded
    )


def _first_choice(data: Any) -> dict[str, Any]:
    choices = _field(data, "choices", list)
    choice = choices[0] if choices else None
    if not isinstance(choice, dict):
        raise _Malformed("choices[0] is not an object")
    return choice


def _reasoning(message: dict[str, Any]) -> str | None:
    """The answer's reasoning: `reasoning_content`, or vLLM's `reasoning`."""
    reasoning: str | None = _optional(message, "reasoning_content", str)
    return _optional(message, "reasoning", str) if reasoning is None else reasoning


def _check_encodable(raw: bytes, kept: dict[str, Any]) -> None:
    """Valid JSON, but no part file can hold a lone surrogate: retried, then failed like any
    bad answer. `raw` tells whether `kept` (the parts of the answer kept) may hold one."""
    if may_hold_surrogates(raw):
        unencodable = where_unencodable(kept)
        if unencodable:
            raise _Malformed(f"{unencodable} is a lone surrogate, not text")


def _malformed(raw: bytes, err: ValueError | RecursionError | _Malformed) -> RequestFailed:
    """The retryable failure of a body that is no chat completion: what is wrong, its first bytes."""
    text = raw[:ERROR_BODY_CHARS].decode("utf-8", "replace")
    why = f" ({err})" if isinstance(err, _Malformed) else ""
    return RequestFailed(FailureKind.RETRYABLE, f"malformed response{why}: {text}")


#: a JSON type as errors.jsonl says it (not Python's "a int", "a dict")
_JSON_KINDS: dict[type, str] = {dict: "an object", list: "an array", str: "a string", int: "a whole number"}


def _field(node: Any, key: str, kind: type) -> Any:
    """`node[key]`, which must be a `kind` (a bool is not an int here)."""
    value = node.get(key) if isinstance(node, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _Malformed(f"{key} is missing or not {_JSON_KINDS[kind]}")
    return value


def _optional(node: dict[str, Any], key: str, kind: type) -> Any:
    """`node[key]` if present and not null; else None. Present with another type: malformed."""
    if node.get(key) is None:
        return None
    value = _field(node, key, kind)
    if kind is int and value < 0:
        raise _Malformed(f"{key} is negative")
    if kind is int and value > MAX_TOKEN_COUNT:
        raise _Malformed(f"{key} is {value}, more tokens than any answer holds")
    return value


def _spec_accept_length(data: dict[str, Any], completion_tokens: int) -> float | None:
    for path, kind in SPEC_FIELDS:
        node: Any = data
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, int | float) or not 0 < node < MAX_TOKEN_COUNT:  # NaN, Infinity too
            continue
        if kind == "length":
            return float(node)
        if completion_tokens:
            return completion_tokens / float(node)
    return None
