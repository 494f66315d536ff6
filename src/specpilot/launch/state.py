"""The local registry of runs: `${SPECPILOT_HOME:-~/.specpilot}/runs/<name>/state.json`.

It lives on *this* machine even for SSH runs, so `status`, `logs`, `down` and
`generate --run NAME` find the host, the pid and the endpoint from a new shell.

The file is one `RunState`. Its JSON keys are those of the first release (`started_at`,
not `started_at_s`), so runs started by any version load; keys added since then
(`exit_path`, `start_ticks`, `run_token`, `ready_log_bytes`, `crash`, ...) may be missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specpilot.errors import UserError
from specpilot.spec import HostSection

STATE_FILE = "state.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class DamagedState(ValueError):
    """A state file's JSON does not hold a run state: names the key and what is wrong."""


def specpilot_home() -> Path:
    """$SPECPILOT_HOME (default ~/.specpilot): a folder, or nothing yet (made when a run starts);
    a file, a symlink loop or a symlink to nothing there is refused with the variable named."""
    given = os.environ.get("SPECPILOT_HOME")
    home = Path(given or Path.home() / ".specpilot")
    try:
        is_folder = stat.S_ISDIR(home.stat().st_mode)
    except FileNotFoundError:
        if not home.is_symlink():
            return home
        problem = "is a symlink to nothing"
    except OSError as err:  # ELOOP: a symlink loop; EACCES, ENOTDIR on the way
        problem = f"cannot be used ({err.strerror})"
    else:
        if is_folder:
            return home
        problem = "is a file, not a folder"
    raise UserError(
        f"{home} {problem}",
        field="SPECPILOT_HOME" if given else "~/.specpilot",
        fix="set SPECPILOT_HOME to a folder of your own (or to a path that does not exist yet)",
    )


def check_run_name(name: str, field: str = "name") -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise UserError(
            f"run name {name!r} is not usable as a directory name",
            field=field,
            fix="use letters, digits, '.', '_' and '-'",
        )
    return name


def run_folder(name: str) -> Path:
    """The run's local folder: its state, and everything of a run on this machine
    (launch.sh, env, spec.toml, engine.log), so SPECPILOT_HOME moves all of it."""
    return specpilot_home() / "runs" / check_run_name(name)


def own_run_folder(name: str) -> Path:
    """`run_folder(name)`, refused (UserError) when it exists and belongs to another user:
    its files would be another user's run, and writing them fails halfway."""
    folder = run_folder(name)
    try:
        owner_uid = folder.stat().st_uid
    except FileNotFoundError:
        return folder
    if owner_uid != os.getuid():
        raise UserError(
            f"run folder {folder} belongs to uid {owner_uid}, not to you (uid {os.getuid()})",
            field="name",
            fix="give the spec another name, or set SPECPILOT_HOME to a folder of your own",
        )
    return folder


def state_path(name: str) -> Path:
    return run_folder(name) / STATE_FILE


class _Reader:
    """Typed values out of a JSON object; a missing or mistyped key is DamagedState."""

    def __init__(self, data: object, within: str | None = None) -> None:
        if not isinstance(data, dict):
            raise DamagedState(
                "it is not a JSON object" if within is None else f"key {within!r} is not a JSON object"
            )
        self.data: dict[str, Any] = data
        self.prefix = "" if within is None else f"{within}."

    def _get(self, key: str, kinds: tuple[type, ...], required: bool) -> Any:
        if key not in self.data or (self.data[key] is None and not required):
            if required:
                raise DamagedState(f"key {self.prefix + key!r} is missing")
            return None
        value = self.data[key]
        # bool is an int to Python, never to this file
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(kind.__name__ for kind in kinds)
            raise DamagedState(f"key {self.prefix + key!r} is {value!r}, not {names}")
        return value

    def text(self, key: str) -> str:
        return str(self._get(key, (str,), True))

    def optional_text(self, key: str) -> str | None:
        value = self._get(key, (str,), False)
        return None if value is None else str(value)

    def integer(self, key: str) -> int:
        return int(self._get(key, (int,), True))

    def optional_integer(self, key: str) -> int | None:
        value = self._get(key, (int,), False)
        return None if value is None else int(value)

    def number(self, key: str) -> float:
        return float(self._get(key, (int, float), True))

    def optional_number(self, key: str) -> float | None:
        value = self._get(key, (int, float), False)
        return None if value is None else float(value)

    def texts(self, key: str) -> tuple[str, ...]:
        values = self._get(key, (list,), True)
        if not all(isinstance(value, str) for value in values):
            raise DamagedState(f"key {self.prefix + key!r} holds something other than strings")
        return tuple(values)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._get(key, (dict,), False)
        return {} if value is None else dict(value)


def host_options_json(host: HostSection) -> dict[str, Any]:
    """How `[host]` is reached, as `host_options` beside `target` in a state or fleet file."""
    return host.model_dump(exclude={"target"})


def host_from_json(target: object, options: object) -> HostSection:
    """The `[host]` section back from `target` and `host_options`; DamagedState if they are not one."""
    if not isinstance(target, str):
        raise DamagedState(f"key 'target' is {target!r}, not a host target")
    if not isinstance(options, dict | None):
        raise DamagedState(f"key 'host_options' is {options!r}, not a JSON object")
    try:
        return HostSection.model_validate({**(options or {}), "target": target})
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise DamagedState(f"key 'host_options.{key}': {first['msg']}") from None


@dataclass(frozen=True)
class CrashRecord:
    """How a ready run ended, as the state keeps it: the cause and the first line of its error."""

    cause: str
    signature: str | None
    line: str
    exit_status: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "signature": self.signature,
            "line": self.line,
            "exit_status": self.exit_status,
        }

    @classmethod
    def from_json(cls, data: object) -> CrashRecord:
        read = _Reader(data, "crash")
        return cls(
            cause=read.text("cause"),
            signature=read.optional_text("signature"),
            line=read.optional_text("line") or "",
            exit_status=read.optional_integer("exit_status"),
        )


@dataclass(frozen=True)
class RunState:
    """One run as `up` recorded it and `status`, `down`, `generate --run` update it."""

    name: str
    host: HostSection  # JSON: `target` and `host_options`
    remote_dir: str
    log_path: str
    pid: int
    pgid: int
    endpoint: str
    served_model_name: str | None
    engine: str
    engine_version: str
    argv: tuple[str, ...]  # as shown: secret values masked
    phase: str  # starting, ready, failed, stopped, stop_failed
    cause: str | None
    started_at_s: float  # wall clock (time.time())
    # written by later releases: an older state file lacks them
    exit_path: str | None = None
    start_ticks: int | None = None  # the pid's start time: tells it from a recycled pid
    run_token: str | None = None  # in the environment of every process of the run (launch.stop)
    allocations: dict[str, int | float] = field(default_factory=dict)
    exit_status: int | None = None
    ready_log_bytes: int | None = None  # log bytes up to the line that said ready
    crash: CrashRecord | None = None
    failed_at_s: float | None = None
    stopped_at_s: float | None = None
    #: seconds from the launch to ready, for a start that got there (bench budgets starts by it)
    ready_s: float | None = None

    def ended(
        self,
        phase: str,
        cause: str,
        *,
        allocations: Mapping[str, int | float] | None = None,
        exit_status: int | None = None,
        ready_log_bytes: int | None = None,
        ready_s: float | None = None,
    ) -> RunState:
        """The outcome of the start: ready, or failed and why."""
        return replace(
            self,
            phase=phase,
            cause=cause,
            allocations=dict(allocations or {}),
            exit_status=exit_status,
            ready_log_bytes=ready_log_bytes,
            ready_s=ready_s,
        )

    def crashed(self, crash: CrashRecord, at_s: float) -> RunState:
        """A ready run ended serving (a fatal line, or its process gone)."""
        return replace(self, phase="failed", cause=crash.cause, crash=crash, failed_at_s=at_s)

    def stopped(self, phase: str, at_s: float) -> RunState:
        """`down` ended it: "stopped", or "stop_failed" when a member survived SIGKILL."""
        return replace(self, phase=phase, stopped_at_s=at_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": self.host.target,
            "host_options": host_options_json(self.host),
            "remote_dir": self.remote_dir,
            "log_path": self.log_path,
            "exit_path": self.exit_path,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "run_token": self.run_token,
            "pgid": self.pgid,
            "endpoint": self.endpoint,
            "served_model_name": self.served_model_name,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "argv": list(self.argv),
            "phase": self.phase,
            "cause": self.cause,
            "started_at": self.started_at_s,
            "allocations": dict(self.allocations),
            "exit_status": self.exit_status,
            "ready_log_bytes": self.ready_log_bytes,
            "crash": None if self.crash is None else self.crash.to_json(),
            "failed_at": self.failed_at_s,
            "stopped_at": self.stopped_at_s,
            "ready_s": self.ready_s,
        }

    @classmethod
    def from_json(cls, data: object) -> RunState:
        """DamagedState naming the key when a key every release wrote is missing or mistyped."""
        read = _Reader(data)
        allocations = read.mapping("allocations")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in allocations.values()):
            raise DamagedState("key 'allocations' holds something other than numbers")
        crash = read.data.get("crash")
        pid = read.integer("pid")
        return cls(
            name=read.text("name"),
            host=host_from_json(read.data.get("target"), read.data.get("host_options")),
            remote_dir=read.text("remote_dir"),
            log_path=read.text("log_path"),
            pid=pid,
            pgid=read.optional_integer("pgid") or pid,
            endpoint=read.text("endpoint"),
            served_model_name=read.optional_text("served_model_name"),
            engine=read.text("engine"),
            engine_version=read.text("engine_version"),
            argv=read.texts("argv"),
            phase=read.text("phase"),
            cause=read.optional_text("cause"),
            started_at_s=read.number("started_at"),
            exit_path=read.optional_text("exit_path"),
            start_ticks=read.optional_integer("start_ticks"),
            run_token=read.optional_text("run_token"),
            allocations=allocations,
            exit_status=read.optional_integer("exit_status"),
            ready_log_bytes=read.optional_integer("ready_log_bytes"),
            crash=None if crash is None else CrashRecord.from_json(crash),
            failed_at_s=read.optional_number("failed_at"),
            stopped_at_s=read.optional_number("stopped_at"),
            ready_s=read.optional_number("ready_s"),
        )


def write_state(state: RunState) -> Path:
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    path = state_path(state.name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state.")
        with os.fdopen(fd, "w") as out:
            json.dump(state.to_json(), out, indent=2, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    except OSError as err:
        raise home_error(err) from None
    return path


def home_error(err: OSError) -> UserError:
    """The run registry cannot be written (a read-only mount, another user's folder, a full
    disk): one line naming the variable, not the raw error of the mkdir."""
    given = os.environ.get("SPECPILOT_HOME")
    return UserError(
        f"{specpilot_home()} cannot be written ({err.strerror or err})",
        field="SPECPILOT_HOME" if given else "~/.specpilot",
        fix="set SPECPILOT_HOME to a folder you can write (each run keeps its state and files there), "
        "or make this one writable",
    )


@contextlib.contextmanager
def start_lock(name: str) -> Iterator[None]:
    """One start of run `name` at a time: a second `up` of the same spec meanwhile is refused
    naming the first (it took the first's run for a dead one and stopped it, and both failed).
    An flock: it goes with its holder, however that ends."""
    folder = specpilot_home() / "locks"
    path = folder / f"{check_run_name(name)}.start"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:
        raise home_error(err) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise UserError(
                f"run {name!r} is being started by another `specpilot up` or `specpilot job` (pid {holder})",
                field="name",
                fix=f"wait for that start, then `specpilot status {name}`; or give the spec another name",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def load_state_file(path: Path) -> RunState:
    """The run state in `path`: FileNotFoundError if there is none, DamagedState if it is unreadable."""
    try:
        text = path.read_text()
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise DamagedState(f"it is unreadable ({err})") from None
    try:
        data = json.loads(text)
    except ValueError as err:
        raise DamagedState(f"it is not valid JSON ({err})") from None
    return RunState.from_json(data)


def read_state(name: str, *, field: str = "NAME") -> RunState:
    """Run `name`'s state; a missing or damaged file is a UserError naming it and the fix."""
    path = state_path(name)
    try:
        return load_state_file(path)
    except FileNotFoundError:
        raise UserError(
            f"no run named {name!r} (looked for {path})",
            field=field,
            fix="start it with `specpilot up SPEC`, or set SPECPILOT_HOME as when it was started",
        ) from None
    except DamagedState as err:
        raise UserError(
            f"{path} is damaged: {err}",
            field=field,
            fix=f"delete {path.parent} if the run is gone, or start it again with `specpilot up SPEC`",
        ) from None
