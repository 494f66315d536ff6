"""The one interface every place a server can run behind: this machine or an SSH host.

Why an interface and not helpers around `subprocess`: the incident's launch broke
at every seam between "here" and "there" (shell quoting, a truncated copy, a pid
never printed). Every operation here takes argv lists, never shell text, and
every write is verified on the far side before it becomes visible.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunResult:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class PutResult:
    """A file that now exists at `path` with exactly these bytes."""

    path: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class PortOwner:
    """Whoever listens on a TCP port: enough to tell the user what to stop."""

    port: int
    pid: int | None
    argv: tuple[str, ...]


@dataclass(frozen=True)
class ProcStat:
    """One process as /proc/PID/stat shows it. (pid, start_ticks) identifies a process
    for good: a recycled pid has another start time."""

    state: str  # R, S, D, Z (zombie), X (dead), ...
    pgid: int
    start_ticks: int  # clock ticks after boot

    @property
    def exited(self) -> bool:
        return self.state in ("Z", "X", "x")


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    memory_total_mib: int
    memory_free_mib: int


@dataclass(frozen=True)
class HostFacts:
    """What a plan or a launch may want to know about the host before starting."""

    hostname: str
    home: str
    python_version: str | None
    disk_free_bytes: int | None
    gpus: tuple[GpuFacts, ...] = ()
    engine_versions: Mapping[str, str] = field(default_factory=dict)


class Host(abc.ABC):
    """A place to put files and run processes. All paths are the host's own paths."""

    #: how the user named it: "local", "ssh://user@host:port", or an ssh_config alias
    target: str

    @abc.abstractmethod
    async def home(self) -> str:
        """The host user's home directory (run directories live below it)."""

    @abc.abstractmethod
    async def put(self, path: str, data: bytes, mode: int = 0o644) -> PutResult:
        """Write `data` to `path` atomically: temp file beside it, sha256 checked on the
        far side, then rename. On any mismatch the old file stays and HostError is raised."""

    @abc.abstractmethod
    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        """Read a file (or part of it). FileNotFoundError if missing."""

    @abc.abstractmethod
    async def sha256(self, path: str) -> str | None:
        """The far side's sha256 of a file, or None if it does not exist."""

    @abc.abstractmethod
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
        """Run argv to completion. `check=True` raises HostError on a non-zero exit."""

    @abc.abstractmethod
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
        """Start argv in a new session (its pid is its process group id), stdout and
        stderr appended to `log_path`, the pid written to `pid_path`; return the pid.
        The environment is exactly `env` (nothing inherited). Raises HostError when no
        pid comes back. A watcher process is the new process's parent: it reaps it and
        writes its returncode to `exit_path` (read with `exit_status`)."""

    @abc.abstractmethod
    async def exit_status(self, exit_path: str) -> int | None:
        """The returncode the watcher recorded in `exit_path` (-N: killed by signal N), or
        None while the process runs or when its watcher could not record it."""

    @abc.abstractmethod
    async def proc_stat(self, pid: int) -> ProcStat | None:
        """State, process group and start time of a process, or None if it is gone."""

    @abc.abstractmethod
    async def proc_argv(self, pid: int) -> list[str] | None:
        """`/proc/PID/cmdline` split on NUL, or None if the process is gone."""

    @abc.abstractmethod
    async def proc_env(self, pid: int) -> dict[str, str] | None:
        """`/proc/PID/environ` parsed, or None if the process is gone."""

    @abc.abstractmethod
    async def pid_alive(self, pid: int) -> bool:
        """True while the process exists and is not a zombie."""

    @abc.abstractmethod
    async def signal_group(self, pgid: int, signum: int) -> bool:
        """Send a signal to a process group; False if no such group."""

    @abc.abstractmethod
    async def port_owner(self, port: int) -> PortOwner | None:
        """Who listens on TCP `port` on the host, or None if nobody."""

    @abc.abstractmethod
    def follow(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
        """Yield the file's bytes from `offset` on, then new bytes as they are appended,
        with at most ~100 ms delay, until the consumer stops iterating."""

    @abc.abstractmethod
    async def facts(self) -> HostFacts:
        """GPUs (nvidia-smi when present), disk free, Python and engine versions."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections."""

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
