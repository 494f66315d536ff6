"""A server nobody listens on is a connection error naming the server, not a `--model` problem."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from specpilot.errors import UserError
from specpilot.generate.dispatch.endpoints import Endpoint, default_model
from tests.fakeengines.standin import StandIn
from tests.fixtures.ports import free_port


async def _ask(endpoints: list[Endpoint]) -> str:
    async with aiohttp.ClientSession() as session:
        return await default_model(session, endpoints, None)


def test_a_dead_server_is_a_connection_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UserError) as err:
        asyncio.run(_ask([Endpoint(url)]))
    assert err.value.field == "--server"
    assert f"cannot connect to {url} (connection refused" in str(err.value)
    assert "--model" not in str(err.value).split("(", 1)[0]


def test_a_live_server_without_models_is_still_a_model_question() -> None:
    """It answers, with no model list: then the model name is what is missing."""

    async def no_models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    with StandIn(routes={"/v1/models": no_models}) as server, pytest.raises(UserError) as err:
        asyncio.run(_ask([Endpoint(server.url)]))
    assert err.value.field == "--model"
