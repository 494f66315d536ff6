"""Fixtures for the host suite: the same tests run against LocalHost and a real SSHHost."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from specpilot.hosts import Host, LocalHost, open_host
from tests.fixtures.sshd import SshdServer

T = TypeVar("T")
HostFactory = Callable[[], Host]


def ssh_host(server: SshdServer, **overrides: Any) -> Host:
    settings: dict[str, Any] = {
        "identity_file": server.identity_file,
        "known_hosts": server.known_hosts,
    }
    settings.update(overrides)
    return open_host(server.target, **settings)


@pytest.fixture(params=["local", "ssh"])
def make_host(request: pytest.FixtureRequest) -> HostFactory:
    """A factory for the host under test; each test opens and closes its own."""
    if request.param == "local":
        return LocalHost
    server: SshdServer = request.getfixturevalue("sshd")
    return lambda: ssh_host(server)


def drive(make: HostFactory, body: Callable[[Host], Awaitable[T]]) -> T:
    """Run `body` against a freshly opened host in its own event loop."""

    async def main() -> T:
        async with make() as host:
            return await body(host)

    return asyncio.run(main())


def leftovers(directory: Path, name: str) -> list[Path]:
    """Temp files a put() left beside `name` (there must be none)."""
    return sorted(directory.glob(f".{name}.specpilot-*"))


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a real full disk."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({done.stderr.strip()}); "
                    "the disk-full test needs root with CAP_SYS_ADMIN")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)
