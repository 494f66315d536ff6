"""A Host held in memory, beside the real ones (as httpx ships `MockTransport` beside its
transports), for tests of the code above the host (launch's file shipping and verification,
status, down's reporting) that need no real process.

Files are a dict of path -> bytes. A process is a `MemoryProcess`: its argv, env, group and
start time, its log lines, whether it is alive, how it ended, and whether it ends on SIGTERM.
`run` answers the shell commands the code above the host runs (`mkdir`, `mv`, `sha256sum`,
`tail`, `env -0`) from that state, and a `python3 -c SCRIPT` with the answer its caller gave
for that script (`scripts`: the host knows no script of the layers above it); any other command
is a test failure naming it, so nothing passes by accident. A spawned process does what
`spawn_script` does to it (none: it runs until signalled, printing nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shlex
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from specpilot.hosts.base import GpuFacts, Host, HostFacts, PortOwner, ProcStat, PutResult, RunResult

HOME = "/home/u"


@dataclass
class MemoryProcess:
    """One scripted process on the memory host."""

    pid: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    pgid: int = 0  # 0: its own pid (the leader of its group)
    start_ticks: int = 1000
    alive: bool = True
    returncode: int | None = None  # what its watcher recorded once it ended
    ends_on_sigterm: bool = True  # False: only SIGKILL ends it (vLLM's resource_tracker)
    signals: list[int] = field(default_factory=list)  # every signal it was sent
    log_path: str = ""  # where a spawned process writes (spawn_detached)
    exit_path: str = ""  # where its watcher records its end

    def __post_init__(self) -> None:
        self.pgid = self.pgid or self.pid

    def signal(self, signum: int) -> bool:
        """Deliver a signal; True when it ended the process."""
        self.signals.append(signum)
        if self.alive and (signum == signal.SIGKILL or self.ends_on_sigterm):
            self.alive = False
            self.returncode = -signum
            return True
        return False


#: what a spawned process does: given it (and the host), e.g. write its log lines
Script = Callable[[MemoryProcess, "MemoryHost"], None]
#: the stdout of `python3 -c SCRIPT ARGS...` (exit 0), given the host and the ARGS
ScriptAnswer = Callable[["MemoryHost", list[str]], str]
#: a shell command's (exit status, stdout); None: the memory host cannot answer it
Answer = tuple[int, str] | None


class MemoryHost(Host):
    """Host state in dicts; `health` is what each endpoint's probe answers (path, status)."""

    def __init__(
        self,
        *,
        target: str = "memory",
        gpus: tuple[GpuFacts, ...] = (),
        scripts: Mapping[str, ScriptAnswer] | None = None,
        spawn_script: Script | None = None,
    ) -> None:
        self.target = target
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, int] = {}
        self.dirs: set[str] = {HOME}
        self.processes: dict[int, MemoryProcess] = {}
        self.ports: dict[int, PortOwner] = {}
        self.health: dict[str, tuple[str, int]] = {}
        self.env: dict[str, str] = {"PATH": "/usr/bin:/bin", "HOME": HOME}
        self.missing_programs: set[str] = set()  # what `[engine] command` does not find
        self.scripts = dict(scripts or {})
        self.spawn_script = spawn_script
        self.commands: list[list[str]] = []  # every argv `run` was given
        self.gpus = gpus
        #: above the kernel's largest pid (pid_max <= 2**22): a call that reached this machine
        #: by mistake finds no such process
        self._next_pid = 2**22 + 1000

    # --- processes a test sets up ---

    def add_process(self, argv: Sequence[str], **fields: object) -> MemoryProcess:
        self._next_pid += 1
        process = MemoryProcess(self._next_pid, list(argv), **fields)  # type: ignore[arg-type]
        self.processes[process.pid] = process
        return process

    def end(self, process: MemoryProcess, returncode: int) -> None:
        """The process ends on its own; its watcher records how (when it has an exit file)."""
        process.alive = False
        process.returncode = returncode
        if process.exit_path:
            self.files[process.exit_path] = f"{returncode}\n".encode()

    def write_log(self, process: MemoryProcess, text: str) -> None:
        self.files[process.log_path] = self.files.get(process.log_path, b"") + text.encode()

    # --- Host ---

    async def home(self) -> str:
        return HOME

    async def put(self, path: str, data: bytes, mode: int = 0o644) -> PutResult:
        self.files[path] = bytes(data)
        self.modes[path] = mode
        return PutResult(path, len(data), hashlib.sha256(data).hexdigest())

    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        data = self.files[path][offset:]
        return data if limit is None else data[:limit]

    async def sha256(self, path: str) -> str | None:
        data = self.files.get(path)
        return None if data is None else hashlib.sha256(data).hexdigest()

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
        argv = list(argv)
        self.commands.append(argv)
        returncode, stdout = self._answer(argv)
        return RunResult(tuple(argv), returncode, stdout.encode(), b"")

    def _answer(self, argv: list[str]) -> tuple[int, str]:
        name, args = argv[0], argv[1:]
        command = _COMMANDS.get(name)
        answer = command(self, args) if command is not None else None
        if answer is None:
            raise AssertionError(
                f"the memory host cannot run {argv[:3]}: give its answer in MemoryHost's scripts"
            )
        return answer

    # --- the shell commands `run` answers: (exit status, stdout), None for a form it does not know

    def _mkdir(self, args: list[str]) -> Answer:
        self.dirs.add(args[-1])
        return 0, ""

    def _mv(self, args: list[str]) -> Answer:
        if args[0] != "-f":
            return None
        if args[1] not in self.files:
            return 1, ""
        self.files[args[2]] = self.files.pop(args[1])
        return 0, ""

    def _env(self, args: list[str]) -> Answer:
        if args != ["-0"]:
            return None
        return 0, "".join(f"{key}={value}\0" for key, value in self.env.items())

    def _sha256sum(self, args: list[str]) -> Answer:
        found = [path for path in args[1:] if path in self.files]
        lines = [f"{hashlib.sha256(self.files[path]).hexdigest()}  {path}\n" for path in found]
        return (0 if len(found) == len(args) - 1 else 1), "".join(lines)

    def _tail(self, args: list[str]) -> Answer:
        if args[0] != "-n":
            return None
        lines = self.files.get(args[2], b"").decode(errors="replace").splitlines(keepends=True)
        return 0, "".join(lines[-int(args[1]) :])

    def _python3(self, args: list[str]) -> Answer:
        if not (args[0] == "-c" and args[1] in self.scripts):
            return None
        return 0, self.scripts[args[1]](self, args[2:])

    def deliver(self, process: MemoryProcess, signum: int) -> None:
        """Send a signal; a process it ends is recorded as ended by it."""
        if process.signal(signum):
            self.end(process, -signum)

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
        process = self.add_process(
            self._exec_argv(list(argv), env), env=dict(env), log_path=log_path, exit_path=exit_path
        )
        self.files[pid_path] = f"{process.pid}\n".encode()
        self.files.setdefault(log_path, b"")
        if self.spawn_script is not None:
            self.spawn_script(process, self)
        return process.pid

    def _exec_argv(self, argv: list[str], env: Mapping[str, str]) -> list[str]:
        """What runs once `bash SCRIPT` has exec'd: the script's `exec` line, its "${NAME}"
        words filled from `env` (launch.render writes it so)."""
        script = self.files.get(argv[1]) if argv[0] == "bash" and len(argv) == 2 else None
        if script is None:
            return argv
        line = next(line for line in script.decode().splitlines() if line.startswith("exec "))
        filled = re.sub(r'"\$\{(\w+)\}"', lambda match: shlex.quote(env[match.group(1)]), line)
        return shlex.split(filled)[1:]

    async def exit_status(self, exit_path: str) -> int | None:
        text = self.files.get(exit_path, b"").decode().strip()
        return int(text) if text else None

    async def proc_stat(self, pid: int) -> ProcStat | None:
        process = self.processes.get(pid)
        if process is None:
            return None
        return ProcStat("S" if process.alive else "Z", process.pgid, process.start_ticks)

    async def proc_argv(self, pid: int) -> list[str] | None:
        process = self.processes.get(pid)
        return None if process is None else list(process.argv)

    async def proc_env(self, pid: int) -> dict[str, str] | None:
        process = self.processes.get(pid)
        return None if process is None else dict(process.env)

    async def pid_alive(self, pid: int) -> bool:
        process = self.processes.get(pid)
        return process is not None and process.alive

    async def signal_group(self, pgid: int, signum: int) -> bool:
        members = [p for p in self.processes.values() if p.pgid == pgid and p.alive]
        for process in members:
            self.deliver(process, signum)
        return bool(members)

    async def port_owner(self, port: int) -> PortOwner | None:
        return self.ports.get(port)

    async def follow(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
        while True:
            data = self.files.get(path, b"")
            if len(data) > offset:
                yield data[offset:]
                offset = len(data)
            await asyncio.sleep(0.01)

    async def facts(self) -> HostFacts:
        return HostFacts(
            hostname="memory", home=HOME, python_version="3.11.7", disk_free_bytes=1 << 40, gpus=self.gpus
        )

    async def close(self) -> None:
        return None


#: the shell commands `run` answers, by program name
_COMMANDS: dict[str, Callable[[MemoryHost, list[str]], Answer]] = {
    "mkdir": MemoryHost._mkdir,
    "mv": MemoryHost._mv,
    "env": MemoryHost._env,
    "sha256sum": MemoryHost._sha256sum,
    "tail": MemoryHost._tail,
    "python3": MemoryHost._python3,
}
