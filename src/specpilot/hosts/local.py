"""This machine as a Host: same contract as SSHHost, no network in between."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import posixpath
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from specpilot.hosts import agent
from specpilot.hosts.base import RunResult
from specpilot.hosts.common import AGENT_SOURCE, AgentHost, agent_request, error_from_os
from specpilot.hosts.errors import (
    CommandFailed,
    DiskFull,
    HostTimeout,
    PermissionDenied,
    RemoteCommandNotFound,
    stderr_tail,
)
from specpilot.secrets import shown_argv

_IN_PROCESS_OPERATIONS: dict[str, Callable[..., Any]] = {
    "digest": agent.digest,
    "proc_file": agent.proc_file,
    "pid_alive": agent.pid_alive,
    "proc_stat": agent.proc_stat,
    "killpg": agent.killpg,
    "port_owner": agent.port_owner,
    "facts": agent.facts,
}


class LocalHost(AgentHost):
    """Runs everything on this machine; `spawn` goes through a subprocess because
    forking inside a threaded event loop is unsafe."""

    def __init__(self) -> None:
        self.target = "local"

    async def home(self) -> str:
        return os.path.expanduser("~")

    async def _agent_answer(self, operation: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if operation in _IN_PROCESS_OPERATIONS:
            try:
                result = await asyncio.to_thread(_IN_PROCESS_OPERATIONS[operation], **args)
            except OSError as exc:
                return agent.error_answer(exc)
            return {"ok": result}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            AGENT_SOURCE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        # a caller cancelled (an interrupt) still lets the agent finish and reaps it here: a
        # spawn it began ends whole (found by its token), and no transport outlives the loop
        answering = asyncio.ensure_future(process.communicate(agent_request(operation, args)))
        try:
            stdout, stderr = await asyncio.shield(answering)
        except asyncio.CancelledError:
            await answering
            raise
        if process.returncode != 0:
            raise CommandFailed(
                f"host agent ({operation}) on local exited {process.returncode}: {stderr_tail(stderr)}",
                returncode=process.returncode or -1,
                stderr=stderr,
            )
        answer: dict[str, Any] = json.loads(stdout)
        return answer

    async def _prepare_dir(self, directory: str, size_bytes: int) -> None:
        try:
            await asyncio.to_thread(os.makedirs, directory, exist_ok=True)
            stats = await asyncio.to_thread(os.statvfs, directory)
        except OSError as exc:
            raise error_from_os(
                exc.errno,
                exc.strerror or str(exc),
                target=self.target,
                action="prepare directory",
                filename=directory,
            ) from exc
        free_bytes = stats.f_bavail * stats.f_frsize
        if free_bytes < size_bytes:
            raise DiskFull(
                f"put into {directory} on local: needs {size_bytes} bytes, "
                f"{free_bytes} free; free space there or choose another directory"
            )

    async def _write_temp(self, temp_path: str, data: bytes, mode: int) -> None:
        try:
            await asyncio.to_thread(_write_synced, temp_path, data, mode)
        except OSError as exc:
            raise error_from_os(
                exc.errno, exc.strerror or str(exc), target=self.target, action="write", filename=temp_path
            ) from exc

    async def _rename(self, temp_path: str, path: str) -> None:
        try:
            await asyncio.to_thread(_replace_synced, temp_path, path)
        except OSError as exc:
            raise error_from_os(
                exc.errno,
                exc.strerror or str(exc),
                target=self.target,
                action=f"rename to {path}",
                filename=temp_path,
            ) from exc

    async def _remove_quietly(self, path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            return

    async def _forget_connection(self) -> None:
        """There is no connection to lose."""

    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        return await asyncio.to_thread(_read_range, path, offset, limit)

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = 60.0,
        stdin: bytes | None = None,
        check: bool = True,
    ) -> RunResult:
        shown = shown_argv(argv)
        if cwd is not None and not os.path.isdir(cwd):
            # What the SSH side's `cd` reports: exit status 2, the reason on stderr.
            return self._finish(argv, 2, b"", f"cd: {cwd}: no such directory\n".encode(), check)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # so a timeout stops its children too
            )
        except FileNotFoundError:
            if check:
                raise RemoteCommandNotFound(
                    f"run {shown} on local: {argv[0]} not found; install it or give its absolute path"
                ) from None
            # A shell's answer for a missing program, as SSHHost returns it.
            return RunResult(tuple(argv), 127, b"", f"{argv[0]}: not found\n".encode())
        except PermissionError as exc:
            if check:
                raise PermissionDenied(f"run {shown} on local: {exc.strerror}") from exc
            return RunResult(tuple(argv), 126, b"", f"{argv[0]}: {exc.strerror}\n".encode())
        stdout, stderr = await _communicate(process, stdin, timeout_s, shown)
        return self._finish(argv, process.returncode or 0, stdout, stderr, check)

    @staticmethod
    def _finish(argv: Sequence[str], returncode: int, stdout: bytes, stderr: bytes, check: bool) -> RunResult:
        if check and returncode != 0:
            raise CommandFailed(
                f"run {shown_argv(argv)} on local: exit status {returncode}: {stderr_tail(stderr)}",
                returncode=returncode,
                stderr=stderr,
            )
        return RunResult(tuple(argv), returncode, stdout, stderr)

    async def follow(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
        while True:
            data, offset = await asyncio.to_thread(agent.read_new, path, offset)
            if data:
                yield data
            else:
                await asyncio.sleep(agent.FOLLOW_POLL_S)

    async def close(self) -> None:
        """Nothing to release."""


def _write_synced(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_synced(temp_path: str, path: str) -> None:
    os.replace(temp_path, path)
    dir_fd = os.open(posixpath.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_range(path: str, offset: int, limit: int | None) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read() if limit is None else handle.read(limit)


async def _communicate(
    process: asyncio.subprocess.Process, stdin: bytes | None, timeout_s: float | None, shown: str
) -> tuple[bytes, bytes]:
    """(stdout, stderr) of a started command; past `timeout_s`, or when the caller gives up (a
    watcher was stopped), its process group is killed and reaped first, or its transport
    outlives the event loop."""
    try:
        async with asyncio.timeout(timeout_s):
            return await process.communicate(stdin)
    except TimeoutError:
        await _kill_group(process)
        raise HostTimeout(
            f"run {shown} on local: no exit after {timeout_s} s, killed it; "
            "raise the timeout or find out why it hangs"
        ) from None
    except asyncio.CancelledError:
        await _kill_group(process)
        raise


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
