"""Where to send requests: `--server URL` as given, `--run NAME` from `specpilot up`'s state,
or one router: `--router URL` (an `smg` gateway) or `--fleet NAME` (the router of a fleet).

A run's local state lives in `$SPECPILOT_HOME/runs/<NAME>/state.json` (default home
`~/.specpilot`): a `launch.state.RunState`.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass

import aiohttp

from specpilot.errors import UserError
from specpilot.generate.dispatch.client import API_KEY_ENV, KEY_FIX, UNAUTHORIZED_STATUSES, auth_headers
from specpilot.launch.state import check_run_name, read_state, state_path
from specpilot.secrets import shown_url

READY_PHASE = "ready"

#: how long /v1/models may take to answer when asking a server which model it serves
MODELS_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # scheme://host:port, without /v1
    served_model_name: str | None = None
    run_name: str | None = None  # `--run NAME`: the job watches that run's log for a crash
    #: a router: --concurrency is per worker behind it, so it gets `slots` x that in flight
    router: bool = False
    slots: int = 1
    #: routers in front of the same workers (a fleet's replicas): they share its room, and
    #: while one is down the others take all of it
    group: str | None = None


def normalize_url(url: str, field: str = "--server") -> str:
    """`scheme://host:port[/prefix]` without `/v1`; UserError naming a URL that cannot work."""
    given = shown_url(url)  # an error line never shows the URL's password or query
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if "://" not in url:
        url = f"http://{url}"
    fix = "write it as http://HOST:PORT, e.g. http://127.0.0.1:30000"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise UserError(f"{given!r} is not a usable URL ({err})", field=field, fix=fix) from None
    problem = _url_problem(parts, port, url)
    if problem:
        raise UserError(f"{given!r} is not a usable URL: {problem}", field=field, fix=fix)
    return url


def _url_problem(parts: urllib.parse.SplitResult, port: int | None, url: str) -> str | None:
    """What keeps `url` (split as `parts`) from naming a server, or None."""
    if parts.scheme not in ("http", "https"):
        return f"scheme {parts.scheme!r} is not http or https"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0 is not a server port"
    if parts.query or parts.fragment or any(c.isspace() or ord(c) < 32 for c in url):
        return "it holds a query, a fragment, spaces or control characters"
    return None


def endpoint_of_run(name: str) -> Endpoint:
    state = read_state(check_run_name(name, field="--run"), field="--run")
    if state.phase != READY_PHASE:
        raise UserError(
            f"run {name!r} is not ready (phase {state.phase!r})",
            field="--run",
            fix=f"wait for `specpilot status {name}` to say ready",
        )
    return Endpoint(
        normalize_url(state.endpoint, field=str(state_path(name))), state.served_model_name or None, name
    )


def router_endpoint(url: str, field: str = "--router") -> Endpoint:
    """An `smg` router; its workers (GET /workers) set how many requests it gets at once."""
    base = normalize_url(url, field=field)
    try:
        with urllib.request.urlopen(f"{base}/workers", timeout=MODELS_PROBE_TIMEOUT_S) as response:
            workers = json.loads(response.read()).get("workers")
    except (OSError, ValueError, AttributeError) as err:
        raise UserError(
            f"{shown_url(base)} does not answer GET /workers as an smg router does ({err})",
            field=field,
            fix="start the router (`specpilot up FLEET.toml`) or pass its URL; plain servers go in --server",
        ) from None
    if not isinstance(workers, list):
        raise UserError(
            f"{shown_url(base)}/workers holds no worker list", field=field, fix="pass an smg router's URL"
        )
    return Endpoint(base, router=True, slots=max(1, len(workers)))


def endpoints_of_fleet(name: str) -> list[Endpoint]:
    """One per router replica, sharing the workers' room; a replica that does not answer
    yet is kept (the job probes it back) while another one does."""
    from specpilot.fleet.state import read_fleet, router_replicas

    check_run_name(name, field="--fleet")
    urls = [str(r["url"]) for r in router_replicas(read_fleet(name))]
    if len(urls) == 1:
        return [router_endpoint(urls[0], field="--fleet")]
    answered: list[Endpoint] = []
    first_error: UserError | None = None
    for url in urls:
        try:
            answered.append(router_endpoint(url, field="--fleet"))
        except UserError as err:
            first_error = first_error or err
    if not answered:
        assert first_error is not None
        raise first_error
    slots = max(e.slots for e in answered)
    return [Endpoint(normalize_url(url), router=True, slots=slots, group=name) for url in urls]


def resolve_endpoints(
    servers: tuple[str, ...],
    runs: tuple[str, ...],
    routers: tuple[str, ...] = (),
    fleets: tuple[str, ...] = (),
) -> list[Endpoint]:
    endpoints = [Endpoint(normalize_url(url)) for url in servers]
    endpoints += [endpoint_of_run(name) for name in runs]
    endpoints += [router_endpoint(url) for url in routers]
    endpoints += [e for name in fleets for e in endpoints_of_fleet(name)]
    if not endpoints:
        raise UserError(
            "no server given",
            field="--server",
            fix="pass --server http://HOST:PORT (repeatable), --run NAME, --router URL or --fleet NAME",
        )
    if len({e.base_url for e in endpoints}) != len(endpoints):
        raise UserError("the same server is given twice", field="--server", fix="list each server once")
    return endpoints


async def served_context(
    session: aiohttp.ClientSession, endpoints: list[Endpoint], api_key: str | None
) -> int | None:
    """The context in tokens the first answering server reports (`max_model_len` in /v1/models,
    as vLLM and SGLang list it); None where none says."""
    for endpoint in endpoints:
        try:
            async with session.get(
                f"{endpoint.base_url}/v1/models",
                timeout=aiohttp.ClientTimeout(total=MODELS_PROBE_TIMEOUT_S),
                headers=auth_headers(endpoint.base_url, api_key),
            ) as response:
                models = (await response.json(content_type=None)).get("data") or []
                value = models[0].get("max_model_len") if models else None
                if isinstance(value, int) and value > 0:
                    return value
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError, TypeError):
            continue
    return None


async def default_model(
    session: aiohttp.ClientSession, endpoints: list[Endpoint], api_key: str | None
) -> str:
    """The run's served model name, else the first id of the first answering /v1/models."""
    for endpoint in endpoints:
        if endpoint.served_model_name:
            return endpoint.served_model_name
    not_openai: list[str] = []
    unreachable: list[str] = []
    refused: list[str] = []
    for endpoint in endpoints:
        model = await _listed_model(session, endpoint, api_key, (not_openai, unreachable, refused))
        if model is not None:
            return model
    if refused:
        given = "a key it refused" if api_key else "no key"
        raise UserError(
            f"{refused[0]}: the server wants an API key, and this command sent {given}",
            field=API_KEY_ENV,
            fix=KEY_FIX,
        )
    if not_openai:
        raise UserError(
            f"not an OpenAI-compatible server: {not_openai[0]}, not a model list",
            field="--server",
            fix="pass the base URL of a vLLM/SGLang server, e.g. http://HOST:30000",
        )
    if len(unreachable) == len(endpoints):
        # a dead server is a connection problem, not a missing --model
        raise UserError(
            f"cannot connect to {', '.join(unreachable)}",
            field="--server" if len(endpoints) == 1 else "servers",
            fix="start the server (specpilot up SPEC), or check the URL's host and port",
        )
    raise UserError(
        "no server answered /v1/models, so the model name is unknown",
        field="--model",
        fix="start the server or pass --model NAME",
    )


async def _listed_model(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    api_key: str | None,
    found: tuple[list[str], list[str], list[str]],
) -> str | None:
    """The first model id `endpoint`'s /v1/models lists, or None: a server that answers no
    model list is added to the first of `found`, one that cannot be reached to the second,
    one that answers 401/403 (it wants an API key) to the third."""
    not_openai, unreachable, refused = found
    url = f"{endpoint.base_url}/v1/models"
    timeout = aiohttp.ClientTimeout(total=MODELS_PROBE_TIMEOUT_S)
    try:
        async with session.get(
            url, timeout=timeout, headers=auth_headers(endpoint.base_url, api_key)
        ) as response:
            if response.status in UNAUTHORIZED_STATUSES:
                refused.append(f"{shown_url(url)} answered {response.status}")
            if response.status != 200:
                return None
            try:
                models = (await response.json(content_type=None)).get("data") or []
                if models:
                    return str(models[0]["id"])
            except (ValueError, AttributeError, KeyError, TypeError):
                not_openai.append(f"{shown_url(url)} answered {response.content_type}")
    except (aiohttp.ClientConnectionError, TimeoutError) as err:
        unreachable.append(f"{shown_url(endpoint.base_url)} ({_connection_failure(err)})")
    except aiohttp.ClientError:
        return None
    return None


def _connection_failure(err: BaseException) -> str:
    """Why a connection failed, in a few words: the OS's reason where there is one."""
    if isinstance(err, TimeoutError):
        return f"no answer within {MODELS_PROBE_TIMEOUT_S:g} s"
    reason = getattr(err, "os_error", None) or err
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused: nothing listens there"
    return getattr(reason, "strerror", None) or str(reason) or type(err).__name__
