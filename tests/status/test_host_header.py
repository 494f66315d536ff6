"""The live page and /metrics answer only requests whose Host names the bound address.

Once they answered any `Host:`, so a web page the user visited could point its own name at
127.0.0.1 (DNS rebinding) and read the job's ids and error texts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.status.server import StatusSource, bind, host_names_bound_address, serving


async def _statuses(directory: Path, hosts: list[str | None]) -> dict[tuple[str, str | None], int]:
    sock = bind("127.0.0.1:0", public=False, flag="--addr")
    port = sock.getsockname()[1]
    found: dict[tuple[str, str | None], int] = {}
    async with serving(sock, StatusSource(directory)), aiohttp.ClientSession() as session:
        for path in ("/", "/metrics"):
            for host in hosts:
                headers = {"Host": host.format(port=port)} if host is not None else {}
                async with session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as response:
                    found[(path, host)] = response.status
    return found


def test_only_a_host_naming_the_bound_address_is_answered(finished_job: Path) -> None:
    good = ["127.0.0.1:{port}", "localhost:{port}", None]  # None: what the client sends itself
    bad = [
        "rebind.attacker.example:{port}",
        "127.0.0.1:1",
        "127.0.0.2:{port}",
        "[::1]:{port}",
        "127.0.0.1:{port}x",
    ]
    found = asyncio.run(_statuses(finished_job, good + bad))
    for path in ("/", "/metrics"):
        assert [found[(path, host)] for host in good] == [200] * len(good)
        assert [found[(path, host)] for host in bad] == [421] * len(bad)


@pytest.mark.parametrize(
    ("host", "bound", "answered"),
    [
        ("10.1.2.3:8765", ("0.0.0.0", 8765), True),  # bound to all: any address of the machine
        ("gpu-box:8765", ("0.0.0.0", 8765), False),  # a name: could be anyone's
        ("[::1]:8765", ("::1", 8765), True),
        ("localhost:8765", ("::1", 8765), True),
        ("localhost:8765", ("10.1.2.3", 8765), False),
        ("10.1.2.3", ("10.1.2.3", 80), True),  # no port in Host: 80
        ("", ("127.0.0.1", 8765), False),
        (None, ("127.0.0.1", 8765), False),
    ],
)
def test_host_rule(host: str | None, bound: tuple[str, int], answered: bool) -> None:
    assert host_names_bound_address(host, bound) is answered


def test_a_configured_name_is_answered() -> None:
    assert host_names_bound_address("GPU-box:8765", ("0.0.0.0", 8765), ["gpu-box"])
    assert not host_names_bound_address("gpu-box:9999", ("0.0.0.0", 8765), ["gpu-box"])
    assert not host_names_bound_address("other:8765", ("0.0.0.0", 8765), ["gpu-box"])


def test_view_names_its_own_flag_for_a_bad_address(finished_job: Path) -> None:
    result = CliRunner().invoke(cli, ["view", str(finished_job), "--addr", "127.0.0.1:99999"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --addr: '127.0.0.1:99999' is not an address")
    assert "--serve-status" not in result.stderr
