"""Where to send requests: `--server URL` as given, or `--run NAME` from `specpilot up`'s state.

A run's local state lives in `$SPECPILOT_HOME/runs/<NAME>/state.json` (default home
`~/.specpilot`) with at least `name`, `endpoint`, `served_model_name` and `phase`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from specpilot.errors import UserError

HOME_ENV = "SPECPILOT_HOME"
READY_PHASE = "ready"

#: how long /v1/models may take to answer when asking a server which model it serves
MODELS_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # scheme://host:port, without /v1
    served_model_name: str | None = None
    run_name: str | None = None  # `--run NAME`: the job watches that run's log for a crash


def specpilot_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".specpilot")


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if "://" not in url:
        url = f"http://{url}"
    return url


def endpoint_of_run(name: str) -> Endpoint:
    state_file = specpilot_home() / "runs" / name / "state.json"
    if not state_file.exists():
        raise UserError(
            f"no run named {name!r} ({state_file} is missing)",
            field="--run",
            fix="start it with `specpilot up SPEC`, or pass --server URL",
        )
    try:
        state = json.loads(state_file.read_text())
    except ValueError:
        raise UserError(
            f"{state_file} is not valid JSON", field="--run", fix="check the run with `specpilot status NAME`"
        ) from None
    if state.get("phase") != READY_PHASE or not state.get("endpoint"):
        raise UserError(
            f"run {name!r} is not ready (phase {state.get('phase')!r})",
            field="--run",
            fix=f"wait for `specpilot status {name}` to say ready",
        )
    return Endpoint(normalize_url(str(state["endpoint"])), state.get("served_model_name"), name)


def resolve_endpoints(servers: tuple[str, ...], runs: tuple[str, ...]) -> list[Endpoint]:
    endpoints = [Endpoint(normalize_url(url)) for url in servers]
    endpoints += [endpoint_of_run(name) for name in runs]
    if not endpoints:
        raise UserError(
            "no server given",
            field="--server",
            fix="pass --server http://HOST:PORT (repeatable) or --run NAME",
        )
    if len({e.base_url for e in endpoints}) != len(endpoints):
        raise UserError("the same server is given twice", field="--server", fix="list each server once")
    return endpoints


async def default_model(session: aiohttp.ClientSession, endpoints: list[Endpoint]) -> str:
    """The run's served model name, else the first id of the first answering /v1/models."""
    for endpoint in endpoints:
        if endpoint.served_model_name:
            return endpoint.served_model_name
    not_openai = []
    for endpoint in endpoints:
        url = f"{endpoint.base_url}/v1/models"
        try:
            async with session.get(
                url, timeout=aiohttp.ClientTimeout(total=MODELS_PROBE_TIMEOUT_S)
            ) as response:
                if response.status != 200:
                    continue
                try:
                    models = (await response.json(content_type=None)).get("data") or []
                    if models:
                        return str(models[0]["id"])
                except (ValueError, AttributeError, KeyError, TypeError):
                    not_openai.append(f"{url} answered {response.content_type}")
        except (aiohttp.ClientError, TimeoutError):
            continue
    if not_openai:
        raise UserError(
            f"not an OpenAI-compatible server: {not_openai[0]}, not a model list",
            field="--server",
            fix="pass the base URL of a vLLM/SGLang server, e.g. http://HOST:30000",
        )
    raise UserError(
        "no server answered /v1/models, so the model name is unknown",
        field="--model",
        fix="start the server or pass --model NAME",
    )
