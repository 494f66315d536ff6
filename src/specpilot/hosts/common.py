"""What LocalHost and SSHHost share: the verified put, and every /proc-based operation
expressed once through the host-side agent (`specpilot.hosts.agent`).

A subclass supplies only transport: how to run an agent operation, how to write,
rename and remove a file, and how to recover after a dropped connection.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import errno
import hashlib
import json
import posixpath
import re
import signal
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specpilot.engines import registry
from specpilot.hosts import agent
from specpilot.hosts.base import GpuFacts, Host, HostFacts, PortOwner, ProcStat, PutResult
from specpilot.hosts.errors import (
    DiskFull,
    HostConnectionLost,
    HostError,
    PermissionDenied,
    RemoteCommandNotFound,
    TransferCorrupted,
)
from specpilot.secrets import shown_argv

PUT_ATTEMPTS = 3
PUT_RETRY_DELAYS_S = (0.2, 1.0)
AGENT_SOURCE = Path(agent.__file__).read_text()
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def temp_path_beside(path: str) -> str:
    """A unique hidden name in the target's own directory, so the final rename is
    within one file system (atomic) and a leftover is recognisable as ours."""
    head, tail = posixpath.split(path)
    return posixpath.join(head, f".{tail}.specpilot-{uuid.uuid4().hex[:12]}.tmp")


def check_env_names(env: Mapping[str, str]) -> None:
    """Refuse names a process environment cannot carry faithfully."""
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not [A-Za-z_][A-Za-z0-9_]*")
        if "\0" in value:
            raise ValueError(f"environment variable {name} contains a NUL byte")


def error_from_os(
    err: int | None,
    message: str,
    *,
    target: str,
    action: str,
    filename: str | None,
    step: str | None = None,
) -> HostError:
    """The typed HostError for an errno met on the host, with what was tried."""
    where = f"{action} on {target}: {message}" + (f" ({filename})" if filename else "")
    if err in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"{where}; free space on that file system or choose another directory")
    if err in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PermissionDenied(
            f"{where}; the host user may not do this: fix the path's owner/mode or use another path"
        )
    if err == errno.ENOENT and step == "exec":
        return RemoteCommandNotFound(
            f"{where}; install it or give its absolute path (PATH is the one in the given env)"
        )
    return HostError(where)


def split_nul(raw: bytes) -> list[str]:
    """NUL-terminated fields as str; undecodable bytes survive via surrogateescape."""
    fields = raw.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    return [field.decode("utf-8", "surrogateescape") for field in fields]


class AgentHost(Host, abc.ABC):
    """Host operations built from a few transport primitives."""

    target: str

    # --- transport primitives -------------------------------------------------
    @abc.abstractmethod
    async def _agent_answer(self, operation: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run one agent operation on the host; its JSON answer ({"ok"} or {"error"})."""

    @abc.abstractmethod
    async def _prepare_dir(self, directory: str, size_bytes: int) -> None:
        """Create `directory` if needed; DiskFull when it cannot hold size_bytes more."""

    @abc.abstractmethod
    async def _write_temp(self, temp_path: str, data: bytes, mode: int) -> None:
        """Create temp_path (must not exist), write data, set mode, fsync."""

    @abc.abstractmethod
    async def _rename(self, temp_path: str, path: str) -> None:
        """Atomically replace `path` with `temp_path`."""

    @abc.abstractmethod
    async def _remove_quietly(self, path: str) -> None:
        """Remove a file if it exists; never raises (used while handling another error)."""

    @abc.abstractmethod
    async def _forget_connection(self) -> None:
        """Drop a broken connection so the next operation makes a fresh one."""

    # --- agent ----------------------------------------------------------------
    async def _agent(self, operation: str, action: str, **args: Any) -> Any:
        answer = await self._agent_answer(operation, args)
        if "error" in answer:
            failure = answer["error"]
            raise error_from_os(
                failure["errno"],
                failure["message"],
                target=self.target,
                action=action,
                filename=failure.get("filename"),
                step=failure.get("step"),
            )
        result = answer["ok"]
        if isinstance(result, dict) and set(result) == {"b64"}:
            return base64.b64decode(result["b64"])
        return result

    # --- verified put ---------------------------------------------------------
    async def put(self, path: str, data: bytes, mode: int = 0o644) -> PutResult:
        local_sha = hashlib.sha256(data).hexdigest()
        last_drop: HostConnectionLost | None = None
        for attempt in range(PUT_ATTEMPTS):
            temp_path = temp_path_beside(path)
            try:
                await self._prepare_dir(posixpath.dirname(path) or ".", len(data))
                await self._write_temp(temp_path, data, mode)
                await self._verify_far_side(temp_path, path, local_sha, len(data))
                await self._rename(temp_path, path)
                return PutResult(path=path, size_bytes=len(data), sha256=local_sha)
            except HostConnectionLost as drop:
                last_drop = drop
                await self._forget_connection()
                await self._remove_quietly(temp_path)
                if attempt < len(PUT_RETRY_DELAYS_S):
                    await asyncio.sleep(PUT_RETRY_DELAYS_S[attempt])
            except BaseException:
                await asyncio.shield(self._remove_quietly(temp_path))
                raise
        raise HostConnectionLost(
            f"put {path} on {self.target}: the connection dropped in each of {PUT_ATTEMPTS} "
            f"attempts (last: {last_drop}); {path} was left as it was. Check the network/host "
            "and run again"
        )

    async def _verify_far_side(self, temp_path: str, path: str, local_sha: str, size_bytes: int) -> None:
        far = await self._agent("digest", f"checksum {temp_path}", path=temp_path)
        if far is not None and far["sha256"] == local_sha and far["size"] == size_bytes:
            return
        far_text = "missing" if far is None else f"sha256 {far['sha256']}, {far['size']} bytes"
        raise TransferCorrupted(
            f"put {path} on {self.target}: the far side's copy ({far_text}) is not what was "
            f"sent (sha256 {local_sha}, {size_bytes} bytes); the temp copy was removed and "
            f"{path} was left as it was. Run again; if it repeats, check the host's disk and "
            "anything that rewrites files in that directory"
        )

    async def sha256(self, path: str) -> str | None:
        far = await self._agent("digest", f"checksum {path}", path=path)
        return None if far is None else str(far["sha256"])

    # --- processes ------------------------------------------------------------
    async def spawn_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log_path: str,
        pid_path: str,
        exit_path: str,
    ) -> int:
        if not argv:
            raise ValueError("spawn_detached needs a non-empty argv")
        paths = (("cwd", cwd), ("log_path", log_path), ("pid_path", pid_path), ("exit_path", exit_path))
        for name, value in paths:
            if not posixpath.isabs(value):  # relative to what? cwd, home: say it exactly
                raise ValueError(f"spawn_detached {name} must be an absolute path, got {value!r}")
        check_env_names(env)
        action = f"start {shown_argv(argv)}"
        pid = await self._agent(
            "spawn",
            action,
            argv=list(argv),
            env=dict(env),
            cwd=cwd,
            log_path=log_path,
            pid_path=pid_path,
            exit_path=exit_path,
        )
        if not isinstance(pid, int) or pid <= 0:
            raise HostError(f"{action} on {self.target}: no pid came back (got {pid!r})")
        recorded = (await self.read_bytes(pid_path)).decode(errors="replace").strip()
        if recorded != str(pid):
            raise HostError(
                f"{action} on {self.target}: pid file {pid_path} says {recorded!r}, "
                f"the starter said {pid}; refusing to track an unknown process"
            )
        return pid

    async def proc_argv(self, pid: int) -> list[str] | None:
        raw = await self._agent("proc_file", f"read argv of pid {pid}", pid=pid, name="cmdline")
        return None if raw is None else split_nul(raw)

    async def proc_env(self, pid: int) -> dict[str, str] | None:
        raw = await self._agent("proc_file", f"read env of pid {pid}", pid=pid, name="environ")
        if raw is None:
            return None
        return dict(entry.partition("=")[::2] for entry in split_nul(raw))

    async def exit_status(self, exit_path: str) -> int | None:
        try:
            raw = await self.read_bytes(exit_path)
        except FileNotFoundError:
            return None
        try:
            returncode = json.loads(raw)["returncode"]
        except (ValueError, KeyError, TypeError):
            return None  # not written by the watcher: unknown, not a guess
        return returncode if isinstance(returncode, int) else None

    async def proc_stat(self, pid: int) -> ProcStat | None:
        found = await self._agent("proc_stat", f"read the state of pid {pid}", pid=pid)
        if found is None:
            return None
        return ProcStat(
            state=str(found["state"]), pgid=int(found["pgid"]), start_ticks=int(found["start_ticks"])
        )

    async def pid_alive(self, pid: int) -> bool:
        return bool(await self._agent("pid_alive", f"check pid {pid}", pid=pid))

    async def signal_group(self, pgid: int, signum: int) -> bool:
        name = signal.Signals(signum).name
        return bool(await self._agent("killpg", f"send {name} to group {pgid}", pgid=pgid, signum=signum))

    async def port_owner(self, port: int) -> PortOwner | None:
        found = await self._agent("port_owner", f"find who listens on port {port}", port=port)
        if found is None:
            return None
        return PortOwner(port=port, pid=found["pid"], argv=tuple(found["argv"]))

    async def facts(self) -> HostFacts:
        raw = await self._agent("facts", "collect host facts", distributions=host_distributions())
        return HostFacts(
            hostname=raw["hostname"],
            home=raw["home"],
            python_version=raw["python_version"],
            disk_free_bytes=raw["disk_free_bytes"],
            gpus=tuple(GpuFacts(*gpu) for gpu in raw["gpus"]),
            engine_versions=dict(raw["engine_versions"]),
        )


def host_distributions() -> list[str]:
    """The distributions whose versions a host's facts report: every engine's, and torch."""
    return [*(dist for engine in registry.ENGINES for dist in engine.distributions), "torch"]


def agent_request(operation: str, args: Mapping[str, Any]) -> bytes:
    """The one stdin line the agent reads."""
    return (json.dumps({"op": operation, "args": dict(args)}) + "\n").encode()
