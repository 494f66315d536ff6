"""The small program that does host-side work, identically here and over SSH.

Why one program for both: "what LocalHost does" and "what SSHHost does" must not
drift apart. LocalHost calls these functions in-process (spawn runs it as a
subprocess so a fork never happens inside our threaded event loop); SSHHost ships
this file's source as `python3 -I -c SOURCE`, started once per connection, and
speaks JSON lines: a request on stdin, its answer on stdout. Requests travel on
stdin, so argv and env values (which may hold secrets) never appear in a process
list.

Standard library only, and syntax a Python 3.7 on a GPU host still runs.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import platform
import select
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

#: nvidia-smi can hang on a wedged driver; facts() must not hang with it
NVIDIA_SMI_TIMEOUT_S = 30
_NVIDIA_SMI_QUERY = "--query-gpu=index,name,memory.total,memory.free"
FOLLOW_POLL_S = 0.05
_READ_CHUNK_BYTES = 1 << 20


class StepError(OSError):
    """An OSError that also says which step of a multi-step operation failed."""

    def __init__(self, err: int, message: str, filename: str | None, step: str) -> None:
        super().__init__(err, message, filename)
        self.step = step


def digest(path: str) -> dict[str, Any] | None:
    """sha256 and size of a file as it is on this machine's disk, None if missing."""
    hasher = hashlib.sha256()
    size_bytes = 0
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return None
    with handle:
        for chunk in iter(lambda: handle.read(_READ_CHUNK_BYTES), b""):
            hasher.update(chunk)
            size_bytes += len(chunk)
    return {"sha256": hasher.hexdigest(), "size": size_bytes}


def proc_file(pid: int, name: str) -> bytes | None:
    """Raw bytes of /proc/PID/NAME (cmdline, environ), None if the process is gone; empty
    when it may not be read (another user's environ)."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        return b""


def pid_alive(pid: int) -> bool:
    """True while the process exists and is neither a zombie nor dead."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3]
    return state not in (b"Z", b"X", b"x")


def killpg(pgid: int, signum: int) -> bool:
    """Signal a process group; False when no such group exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def port_owner(port: int) -> dict[str, Any] | None:
    """pid and argv of the process listening on TCP `port`, via /proc (no `ss` needed).

    Finds the LISTEN sockets' inodes in /proc/net/tcp{,6}, then the process holding
    one of them among /proc/*/fd. pid None means someone listens but this user may
    not see who (another user's process, without root)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for pid in sorted(int(name) for name in os.listdir("/proc") if name.isdigit()):
        if _holds_any(pid, inodes):
            cmdline = proc_file(pid, "cmdline") or b""
            argv = [os.fsdecode(arg) for arg in cmdline.split(b"\0")[:-1]]
            return {"pid": pid, "argv": argv}
    return {"pid": None, "argv": []}


def _listening_inodes(port: int) -> set[str]:
    """The `socket:[INODE]` links of the sockets listening on TCP `port`, IPv4 and IPv6."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == "0A" and local_port == port:
                inodes.add(f"socket:[{fields[9]}]")
    return inodes


def _holds_any(pid: int, links: set[str]) -> bool:
    """Whether one of the process's open files is one of `links` (False: gone, or not ours to see)."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(fd_dir + "/" + fd)
        except OSError:
            continue
        if link in links:
            return True
    return False


def proc_stat(pid: int) -> dict[str, Any] | None:
    """State letter, process group and start time (clock ticks after boot) from
    /proc/PID/stat; None if the process is gone. (pid, start_ticks) names one process:
    a recycled pid has another start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return {"state": fields[0], "pgid": int(fields[2]), "start_ticks": int(fields[19])}


def returncode_of(status: int) -> int:
    """A wait status as Python's returncode: the exit code, or -N for signal N."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _write_atomic(path: str, text: str) -> None:
    temp_path = f"{path}.{os.getpid()}.tmp"
    with open(temp_path, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp_path, path)


def _exec_engine(argv: list[str], env: dict[str, str], cwd: str, log_path: str, err_fd: int) -> None:
    """In the engine's child: own session, cwd, log as stdout/stderr, exec; an OSError
    goes back through `err_fd` (close-on-exec, so a working exec closes it)."""
    step = "setsid"
    try:
        os.setsid()
        step = "cwd"
        os.chdir(cwd)
        step = "log"
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        step = "exec"
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(err_fd, json.dumps({"errno": exc.errno, "message": exc.strerror, "step": step}).encode())
    os._exit(127)


def _watch_engine(
    argv: list[str], env: dict[str, str], cwd: str, log_path: str, exit_path: str, pid_fd: int, err_fd: int
) -> None:  # pragma: no cover - runs in the forked watcher
    """The engine's parent: start it, report its pid, reap it, record how it ended.

    Why a parent of our own: a detached engine's parent is otherwise init, and where
    init does not reap (many containers) a dead engine stays a zombie whose exit
    status nobody can read. This process holds nothing open but the exit file."""
    engine_pid = os.fork()
    if engine_pid == 0:
        _exec_engine(argv, env, cwd, log_path, err_fd)
    os.close(err_fd)
    os.write(pid_fd, str(engine_pid).encode())
    os.close(pid_fd)
    null_fd = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null_fd, fd)  # the caller's pipes (an SSH channel) must not wait for us
    os.closerange(3, 65536)
    _, status = os.waitpid(engine_pid, 0)
    with contextlib.suppress(OSError):  # the run dir is gone: nobody is left to read it
        _write_atomic(exit_path, json.dumps({"returncode": returncode_of(status)}) + "\n")
    os._exit(0)


def _read_all(fd: int) -> bytes:
    data = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            os.close(fd)
            return data
        data += chunk


def spawn(
    argv: list[str], env: dict[str, str], cwd: str, log_path: str, pid_path: str, exit_path: str
) -> int:
    """Start argv in a new session with exactly `env`, output appended to log_path,
    under a watcher that writes its returncode to `exit_path` when it ends.

    Process tree: this process -> a short-lived middle (new session, exits at once so
    nothing here has to reap) -> the watcher -> the engine (its own session and group).
    The pid is known for certain because the watcher forks it; an exec failure (missing
    program, bad cwd) comes back through a close-on-exec pipe instead of being a pid
    that dies at once. The pid file is written only after exec worked."""
    if os.path.exists(exit_path):
        os.unlink(exit_path)  # an earlier run's ending is not this one's
    pid_read, pid_write = os.pipe()
    err_read, err_write = os.pipe()  # both close-on-exec
    middle = os.fork()
    if middle == 0:  # pragma: no cover - runs in the child
        try:
            os.close(pid_read)
            os.close(err_read)
            os.setsid()
            if os.fork() == 0:
                _watch_engine(argv, env, cwd, log_path, exit_path, pid_write, err_write)
        finally:
            os._exit(0)
    os.close(pid_write)
    os.close(err_write)
    os.waitpid(middle, 0)
    pid_text = _read_all(pid_read).decode()
    report_bytes = _read_all(err_read)
    if report_bytes:
        report = json.loads(report_bytes.decode())
        filename = {"cwd": cwd, "log": log_path, "exec": argv[0]}.get(report["step"])
        raise StepError(report["errno"], report["message"], filename, report["step"])
    if not pid_text:
        raise StepError(0, "the watcher reported no pid", None, "fork")
    pid = int(pid_text)
    _write_atomic(pid_path, f"{pid}\n")
    return pid


def read_new(path: str, offset: int) -> tuple[bytes, int]:
    """Bytes appended to `path` since `offset`, and the new offset. A file that
    shrank below `offset` was truncated or replaced: start again from 0."""
    try:
        with open(path, "rb") as handle:
            size_bytes = os.fstat(handle.fileno()).st_size
            if size_bytes < offset:
                offset = 0
            handle.seek(offset)
            data = handle.read(_READ_CHUNK_BYTES)
    except FileNotFoundError:
        return b"", offset
    return data, offset + len(data)


def follow(path: str, offset: int) -> None:
    """Stream a growing file to stdout until stdin reaches EOF (the caller left)."""
    out = sys.stdout.buffer
    while True:
        readable, _, _ = select.select([0], [], [], FOLLOW_POLL_S)
        if readable and not os.read(0, 4096):
            return
        data, offset = read_new(path, offset)
        while data:
            out.write(data)
            out.flush()
            data, offset = read_new(path, offset)


def facts(distributions: list[str]) -> dict[str, Any]:
    """Host name, home, Python, disk free below home, GPUs, and the installed version of each
    of `distributions` (the engines' and torch: the caller names them, this file knows no engine)."""
    home = os.path.expanduser("~")
    gpus = _gpus()
    engines = _versions(distributions)
    return {
        "hostname": socket.gethostname(),
        "home": home,
        "python_version": platform.python_version(),
        "disk_free_bytes": shutil.disk_usage(home).free,
        "gpus": gpus,
        "engine_versions": engines,
    }


def _gpus() -> list[list[Any]]:
    """[index, name, total MiB, free MiB] of each GPU nvidia-smi lists ([] without it)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        done = subprocess.run(
            [smi, _NVIDIA_SMI_QUERY, "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
        lines = done.stdout.decode().splitlines() if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        lines = []
    gpus = []
    for line in lines:
        index, name, total_mib, free_mib = (part.strip() for part in line.split(","))
        gpus.append([int(index), name, int(total_mib), int(free_mib)])
    return gpus


def _versions(distributions: list[str]) -> dict[str, str]:
    """The installed version of each of `distributions` that is installed here."""
    engines = {}
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7
        metadata = None  # type: ignore[assignment]
    for dist in distributions if metadata else ():
        try:
            engines[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # not installed here
            continue
        except ValueError:  # its METADATA is not UTF-8: a damaged install, said as such
            engines[dist] = "unreadable"
    return engines


def _encode(value: object) -> object:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    return value


_OPERATIONS: dict[str, Callable[..., Any]] = {
    "digest": digest,
    "proc_file": proc_file,
    "pid_alive": pid_alive,
    "proc_stat": proc_stat,
    "killpg": killpg,
    "port_owner": port_owner,
    "spawn": spawn,
    "facts": facts,
}


def error_answer(exc: OSError) -> dict[str, Any]:
    """An OSError as the answer the caller maps to a typed HostError."""
    return {
        "error": {
            "errno": exc.errno,
            "message": exc.strerror or str(exc),
            "filename": exc.filename,
            "step": getattr(exc, "step", None),
        }
    }


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """Run one request; an OSError becomes an error answer."""
    try:
        return {"ok": _encode(_OPERATIONS[request["op"]](**request["args"]))}
    except OSError as exc:
        return error_answer(exc)


def main() -> None:
    """Answer request lines from stdin until EOF, one JSON line each, so one agent
    serves a whole connection. `follow` instead turns the process into a byte stream."""
    for line in iter(sys.stdin.buffer.readline, b""):
        request = json.loads(line.decode())
        if request["op"] == "follow":
            follow(**request["args"])
            return
        sys.stdout.write(json.dumps(answer(request)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
