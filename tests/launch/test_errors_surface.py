"""Errors in `up`'s side work surface, named; the expected ones are still handled.

Before, each of these caught every exception: a bug in reading the host's facts
launched with no facts, a bug in the crash watcher of a job's run became a note and the
job went on unwatched, and a bug in the health probe read as "nothing answered".
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import specpilot.hosts.local as local
import specpilot.launch.serving as serving
from specpilot.hosts import open_host
from specpilot.hosts.errors import CommandFailed, HostConnectionLost
from specpilot.hosts.local import LocalHost
from specpilot.launch import ops
from specpilot.launch.health import probe
from specpilot.launch.ops import run_down
from specpilot.launch.state import RunState, run_folder, state_path
from specpilot.taskgroup import TaskFailed
from tests.fakeengines.scenarios import SCENARIOS
from tests.fixtures.memory_host import launch_host, playing
from tests.launch.conftest import SpecFactory, free_port
from tests.launch.helpers import up


def _facts_fail(monkeypatch: pytest.MonkeyPatch, err: Exception) -> None:
    def facts(**_: object) -> dict[str, Any]:
        raise err

    monkeypatch.setitem(local._IN_PROCESS_OPERATIONS, "facts", facts)


def test_facts_the_host_cannot_report_leave_them_out(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _facts_fail(monkeypatch, PermissionError(errno.EACCES, "Permission denied", "/proc/driver"))
    spec = make_spec("sglang_ready", name="no-facts")
    try:
        result = up(spec)
        assert (result.phase, result.cause) == ("ready", "ready"), result.error
        manifest = json.loads((run_folder(spec.name) / "manifest.json").read_text())
        assert manifest["host"] is None
    finally:
        asyncio.run(run_down(spec.name, timeout_s=5.0))


def test_a_bug_in_reading_the_facts_fails_up_named_before_anything_starts(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _facts_fail(monkeypatch, KeyError("gpus"))
    spec = make_spec("sglang_ready", name="facts-bug")
    try:
        with pytest.raises(TaskFailed, match="reading the facts of local failed: KeyError: 'gpus'"):
            up(spec)
        assert not state_path(spec.name).exists()
    finally:
        if state_path(spec.name).exists():  # started after all: leave nothing running
            asyncio.run(run_down(spec.name, timeout_s=5.0))


@pytest.fixture
def ready_run(make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A ready run on a memory host (the watcher's subject is above the host)."""
    host = launch_host(spawn_script=playing(SCENARIOS["sglang_ready"]))
    monkeypatch.setattr("specpilot.launch.ops.host_for", lambda state: host)
    spec = make_spec("sglang_ready", name="watched")
    result = up(spec, host=host)
    assert (result.phase, result.cause) == ("ready", "ready"), result.error
    try:
        yield spec.name
    finally:
        asyncio.run(run_down(spec.name, timeout_s=5.0))


def _watch(name: str, notes: list[str], stops: list[str]) -> None:
    asyncio.run(serving.stop_on_crash(name, stops.append, notes.append, ops.host_for))


def _process_check_fails(monkeypatch: pytest.MonkeyPatch, err: Exception) -> None:
    """The watcher's once-a-second look at the process raises."""

    async def recorded_process(host: object, state: RunState) -> str:
        raise err

    monkeypatch.setattr(serving, "recorded_process", recorded_process)


def test_a_watcher_whose_host_went_away_is_a_note(ready_run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _process_check_fails(monkeypatch, HostConnectionLost("ssh to gpu-a: the connection dropped"))
    notes: list[str] = []
    stops: list[str] = []
    _watch(ready_run, notes, stops)
    assert notes == [f"stopped watching run {ready_run}'s log: ssh to gpu-a: the connection dropped"]
    assert stops == []


def test_a_bug_in_the_watcher_is_raised(ready_run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _process_check_fails(monkeypatch, RuntimeError("bug in the watcher"))
    notes: list[str] = []
    with pytest.raises(RuntimeError, match="bug in the watcher"):
        _watch(ready_run, notes, [])
    assert notes == []


def _probe(endpoint: str) -> Any:
    async def go() -> Any:
        host = open_host("local")
        try:
            return await probe(host, endpoint)
        finally:
            await host.close()

    return asyncio.run(go())


def test_probe_nothing_listening_or_not_http_is_status_zero() -> None:
    assert _probe(f"http://127.0.0.1:{free_port()}").status == 0
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer_garbage() -> None:
            for _ in range(2):  # /health, then /v1/models
                connection, _ = listener.accept()
                with connection:
                    connection.recv(4096)
                    connection.sendall(b"not http at all\r\n\r\n")

        server = threading.Thread(target=answer_garbage, daemon=True)
        server.start()
        assert _probe(f"http://127.0.0.1:{listener.getsockname()[1]}").status == 0
        server.join(timeout=30)


def test_a_probe_that_crashes_is_an_error_not_silence() -> None:
    with pytest.raises(CommandFailed, match=r"health probe of notaurl on local failed: .*unknown url type"):
        _probe("notaurl")


def test_a_bug_in_shipping_one_file_names_it_and_leaves_no_partial_file(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = LocalHost._write_temp

    async def write_temp(self: LocalHost, temp_path: str, data: bytes, mode: int) -> None:
        if Path(temp_path).name.startswith(".env."):
            await asyncio.sleep(0)
            raise RuntimeError("bug in a transfer")
        await real_write(self, temp_path, data, mode)

    monkeypatch.setattr(LocalHost, "_write_temp", write_temp)
    spec = make_spec("sglang_ready", name="ship-bug")
    with pytest.raises(TaskFailed, match="shipping env failed: RuntimeError: bug in a transfer"):
        up(spec)
    run_dir = run_folder(spec.name)
    assert [p.name for p in run_dir.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    assert not (run_dir / "manifest.json").exists() and not state_path(spec.name).exists()
