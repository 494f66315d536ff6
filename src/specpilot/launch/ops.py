"""`status`, `logs` and `down` for a run, from its local state file (works from a new shell)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from specpilot.hosts.base import Host
from specpilot.launch.health import probe
from specpilot.launch.preflight import open_host
from specpilot.launch.state import read_state, write_state
from specpilot.launch.stop import stop_group


def host_for(state: dict[str, Any]) -> Host:
    return open_host(str(state["target"]), dict(state.get("host_options") or {}))


@dataclass
class RunStatus:
    name: str
    phase: str
    pid: int | None
    alive: bool
    uptime_s: float | None
    endpoint: str | None
    endpoint_status: int | None
    served_model_name: str | None
    target: str
    last_lines: list[str] = field(default_factory=list)

    @property
    def serving(self) -> bool:
        return self.alive and self.endpoint_status == 200

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "pid": self.pid,
            "alive": self.alive,
            "uptime_s": None if self.uptime_s is None else round(self.uptime_s, 1),
            "endpoint": self.endpoint,
            "endpoint_status": self.endpoint_status,
            "served_model_name": self.served_model_name,
            "target": self.target,
            "last_lines": self.last_lines,
        }


async def run_status(name: str, *, lines: int = 10) -> RunStatus:
    state = read_state(name)
    host = host_for(state)
    try:
        pid = state.get("pid")
        alive = pid is not None and await host.pid_alive(int(pid))
        phase = str(state.get("phase"))
        if not alive and phase in ("starting", "ready"):
            phase = "exited"  # it was up and is gone: nobody stopped it through specpilot
        endpoint = state.get("endpoint")
        answer = await probe(host, endpoint) if alive and endpoint else None
        tail = await host.run(["tail", "-n", str(lines), str(state["log_path"])], check=False)
        return RunStatus(
            name=name,
            phase=phase,
            pid=pid,
            alive=alive,
            uptime_s=time.time() - float(state["started_at"]) if alive else None,
            endpoint=endpoint,
            endpoint_status=None if answer is None else answer.status,
            served_model_name=state.get("served_model_name"),
            target=str(state["target"]),
            last_lines=tail.stdout.decode(errors="replace").splitlines(),
        )
    finally:
        await host.close()


async def stream_log(name: str, *, follow: bool, quiet_exit_s: float = 1.0) -> AsyncIterator[bytes]:
    """The whole log; with `follow`, then new bytes until the process is gone and the
    log has been quiet for `quiet_exit_s` (or the consumer stops)."""
    state = read_state(name)
    host = host_for(state)
    log_path = str(state["log_path"])
    pid = state.get("pid")
    try:
        if not follow:
            yield await host.read_bytes(log_path)
            return
        async for chunk in _follow_while_alive(host, log_path, pid, quiet_exit_s):
            yield chunk
    finally:
        await host.close()


async def _follow_while_alive(
    host: Host, log_path: str, pid: int | None, quiet_exit_s: float
) -> AsyncIterator[bytes]:
    """New bytes as they come; between them, every `quiet_exit_s`, is the process still there?

    The pending read is waited on, never cancelled: cancelling it would close the
    follow stream, which then ends after the first quiet second.
    """
    stream = host.follow(log_path, 0)
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({pending}, timeout=quiet_exit_s)
            if not done:
                if pid is None or not await host.pid_alive(int(pid)):
                    return
                continue
            finished, pending = pending, None
            try:
                chunk = finished.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        await stream.aclose()  # type: ignore[attr-defined]


async def run_down(name: str, *, timeout_s: float) -> dict[str, Any]:
    """SIGTERM to the run's process group, SIGKILL after `timeout_s`; never by name."""
    state = read_state(name)
    host = host_for(state)
    try:
        pgid = state.get("pgid") or state.get("pid")
        how = "not_running" if pgid is None else await stop_group(host, int(pgid), term_timeout_s=timeout_s)
    finally:
        await host.close()
    state.update(phase="stopped", stopped_at=time.time())
    write_state(state)
    return {"name": name, "pid": state.get("pid"), "phase": "stopped", "stopped": how}
