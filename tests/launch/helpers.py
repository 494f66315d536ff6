"""Running `launch` and inspecting what it left behind."""

from __future__ import annotations

import asyncio
from typing import Any

from specpilot.hosts.base import Host
from specpilot.launch.preflight import open_host
from specpilot.launch.stop import group_members
from specpilot.launch.supervisor import UpOptions, UpResult, launch
from specpilot.spec import Spec


def local_host() -> Host:
    return open_host("local", {})


def up(
    spec: Spec,
    *,
    plan_json: dict[str, Any] | None = None,
    options: UpOptions | None = None,
    host: Host | None = None,
) -> UpResult:
    async def go() -> UpResult:
        the_host = host or local_host()
        try:
            return await launch(spec, the_host, plan_json=plan_json, options=options)
        finally:
            await the_host.close()

    return asyncio.run(go())


def group_alive(pgid: int, host: Host | None = None) -> bool:
    async def go() -> bool:
        the_host = host or local_host()
        try:
            return bool(await group_members(the_host, pgid))
        finally:
            await the_host.close()

    return asyncio.run(go())
