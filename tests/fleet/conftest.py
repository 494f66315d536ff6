"""Fleet fixtures: the real `smg` (the cached `smg` engine environment), fleet files whose
members are stand-in engines, and extra loopback sshd hosts."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specpilot.demo.enginevenv import ensure_engine_venv
from specpilot.fleet.ops import router_running
from specpilot.fleet.state import read_fleet
from tests.fixtures.sshd import SshdServer, start_sshd, stop_sshd
from tests.generate.conftest import fake_server  # noqa: F401  (a fixture used here)
from tests.launch.conftest import SpecFactory, free_port, make_spec, run_home, toml_value  # noqa: F401  (fixtures used here)

FleetFactory = Callable[..., Path]


def router_alive(name: str) -> bool:
    """Some replica of fleet `name`'s router runs (read in a loop of the test's own)."""
    return asyncio.run(router_running(read_fleet(name)))


@pytest.fixture(scope="session")
def smg_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The real gateway from PyPI (pinned in demo/requirements/smg.txt), cached. Run as
    `python -m smg`: the venv is built elsewhere and moved, so its scripts' #! lines are stale."""
    python = ensure_engine_venv("smg", log=lambda line: print(line, file=sys.stderr))
    wrapper = tmp_path_factory.mktemp("smg") / "smg"
    wrapper.write_text(f'#!/bin/sh\nexec "{python}" -m smg "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture
def smg(smg_path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SPECPILOT_SMG", smg_path)
    return smg_path


@pytest.fixture
def make_fleet(make_spec: SpecFactory, tmp_path: Path) -> FleetFactory:  # noqa: F811
    """A fleet file over a stand-in server spec; returns its path."""

    def make(
        hosts: list[object],
        *,
        name: str = "fl",
        scenario: str = "sglang_ready",
        router: dict[str, object] | None = None,
        spec_host: dict[str, object] | None = None,
        standin: dict[str, Any] | None = None,
        args: list[str] | None = None,
    ) -> Path:
        spec = make_spec(scenario, name="member", host=spec_host, standin=standin, args=args)
        assert spec.source_path is not None
        router = {"port": free_port(), "metrics_port": free_port(), "ready_timeout_s": 30, **(router or {})}
        lines = [
            "[fleet]",
            f'name = "{name}"',
            f"server = {toml_value(spec.source_path.name)}",
            "hosts = [" + ", ".join(toml_value(h) for h in hosts) + "]",
            "[router]",
            *(f"{k} = {toml_value(v)}" for k, v in router.items()),
        ]
        path = tmp_path / f"{name}.fleet.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    return make


@pytest.fixture(scope="session")
def sshd_pair(
    sshd: SshdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[SshdServer], str]]:
    """The session's sshd plus a second one on another port with the same keys, and one
    known_hosts file naming both (a fleet's hosts share the spec's [host] key options)."""
    second_dir = tmp_path_factory.mktemp("sshd2")
    for key in ("hostkey", "hostkey.pub", "userkey", "userkey.pub"):
        shutil.copy(sshd.workdir / key, second_dir / key)
    second = start_sshd(second_dir)
    known = tmp_path_factory.mktemp("known") / "known_hosts"
    known.write_text(Path(sshd.known_hosts).read_text() + Path(second.known_hosts).read_text())
    try:
        yield [sshd, second], str(known)
    finally:
        stop_sshd(second)
