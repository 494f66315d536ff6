"""An SSH host (asyncssh): argv-exact commands, verified SFTP shipping, host keys checked.

SSH carries one command string that the remote login shell parses; every command
here is `shlex.join(argv)` of a fixed argv, never text assembled from values.
Host-side work that needs more than one program (spawn with an exact pid, /proc
scans, checksums) runs the agent (`specpilot.hosts.agent`) with the remote
`python3`, its request on stdin.
"""

from __future__ import annotations

import asyncio
import errno
import json
import shlex
import time
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from cryptography.utils import CryptographyDeprecationWarning

with warnings.catch_warnings():
    # cryptography 51 deprecates DSA, and asyncssh names its DSA types at import: ten lines
    # before every answer of a command that can reach a host. Only those: asyncssh's own, of DSA
    warnings.filterwarnings(
        "ignore", message="DSA is deprecated", category=CryptographyDeprecationWarning, module=r"asyncssh\."
    )
    import asyncssh

from specpilot.hosts.base import RunResult
from specpilot.hosts.common import (
    AGENT_SOURCE,
    AgentHost,
    agent_request,
    check_env_names,
    error_from_os,
)
from specpilot.hosts.errors import (
    AuthRefused,
    BadTarget,
    CommandFailed,
    DiskFull,
    HostConnectionLost,
    HostError,
    HostKeyChanged,
    HostKeyUnknown,
    HostTimeout,
    HostUnreachable,
    PermissionDenied,
    RemoteCommandNotFound,
    stderr_tail,
)
from specpilot.hosts.target import Target
from specpilot.secrets import shown_argv

CONNECT_TIMEOUT_S = 15.0
CLEANUP_TIMEOUT_S = 10.0
TIMEOUT_KILL_AFTER_S = 2.0  # SIGTERM at the timeout, SIGKILL this much later
_TIMEOUT_EXITS = (124, 137)  # GNU timeout: TERM worked / KILL was needed
AGENT_TIMEOUT_S = 120.0  # the slowest operation is `facts` (nvidia-smi)
_EXIT_NOT_FOUND = 127
_EXIT_NOT_EXECUTABLE = 126
# Errors meaning "the connection went away", whatever layer noticed first.
_DROPPED = (
    asyncssh.ConnectionLost,
    asyncssh.DisconnectError,
    asyncssh.SFTPConnectionLost,
    asyncssh.SFTPNoConnection,
    ConnectionError,
    BrokenPipeError,
    EOFError,
)
_SFTP_DROPPED = (asyncssh.SFTPConnectionLost, asyncssh.SFTPNoConnection)
# A fixed script; cwd and argv arrive as its positional parameters, never as text.
_CD_THEN_EXEC = 'cd "$1" && shift && exec "$@"'


class _KeyCheckingClient(asyncssh.SSHClient):
    """Sees the server key that known_hosts did not vouch for and says why: unknown
    (no entry for this host) or changed (entries exist, none match)."""

    def __init__(self, known_hosts: asyncssh.SSHKnownHosts, accept_new: bool) -> None:
        self._known_hosts = known_hosts
        self._accept_new = accept_new
        self.verdict: str | None = None  # "unknown" | "changed" | "accepted"
        self.offered_key: asyncssh.SSHKey | None = None
        self.matched_name = ""

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.offered_key = key
        self.matched_name = host if port == 22 else f"[{host}]:{port}"
        known_keys = self._known_hosts.match(host, addr, None if port == 22 else port)[0]
        if known_keys:
            self.verdict = "changed"
            return False
        self.verdict = "accepted" if self._accept_new else "unknown"
        return self._accept_new


class SSHHost(AgentHost):
    """One lazily opened, re-opened-after-a-drop SSH connection to a host."""

    def __init__(
        self,
        target: Target,
        *,
        identity_file: str | None = None,
        known_hosts: str | None = None,
        ssh_config: str | None = None,
        accept_new_host_key: bool = False,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        python: str = "python3",
    ) -> None:
        self.target = target.raw
        self._parsed = target
        self._identity_file = identity_file
        self._known_hosts_path = known_hosts
        self._ssh_config = ssh_config
        self._accept_new = accept_new_host_key
        self._connect_timeout_s = connect_timeout_s
        self._python = python
        self._conn: asyncssh.SSHClientConnection | None = None
        self._agent_proc: asyncssh.SSHClientProcess[bytes] | None = None
        self._agent_lock = asyncio.Lock()
        self._sftp: asyncssh.SFTPClient | None = None
        self._lock = asyncio.Lock()
        self._home: str | None = None

    # --- connecting ---------------------------------------------------------------
    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"host": self._parsed.host}
        if self._parsed.port is not None:
            kwargs["port"] = self._parsed.port
        if self._parsed.user is not None:
            kwargs["username"] = self._parsed.user
        if self._ssh_config is not None:
            kwargs["config"] = [self._ssh_config]
        if self._identity_file is not None:
            kwargs["client_keys"] = [self._identity_file]
        return kwargs

    def _resolve(self) -> tuple[asyncssh.SSHClientConnectionOptions, str]:
        """ssh_config applied (as `ssh` would), and the known_hosts file to check against."""
        kwargs = self._connect_kwargs()
        try:
            options = asyncssh.SSHClientConnectionOptions(**kwargs)
        except FileNotFoundError as exc:
            field = "[host] identity_file" if self._identity_file else "[host] ssh_config"
            raise BadTarget(
                f"{exc.filename} does not exist", field=field, fix="point it at an existing file"
            ) from exc
        except (ValueError, asyncssh.KeyImportError) as exc:
            raise BadTarget(
                f"cannot use the SSH settings for {self.target}: {exc}",
                field="[host] ssh_config / identity_file",
                fix="fix the file named in the message",
            ) from exc
        configured: list[str] = list(cast(Any, options.known_hosts) or [])
        known_hosts = self._known_hosts_path or (configured[0] if configured else None)
        return options, str(Path(known_hosts or "~/.ssh/known_hosts").expanduser())

    def _describe(self, options: asyncssh.SSHClientConnectionOptions) -> str:
        via = f" via ProxyJump {options.tunnel}" if options.tunnel else ""
        alias = f" (alias {self._parsed.host})" if self._parsed.kind == "alias" else ""
        return f"ssh {options.username}@{options.host}:{options.port}{alias}{via}"

    async def _connect(self) -> asyncssh.SSHClientConnection:
        options, known_hosts_path = self._resolve()
        known_hosts = (
            asyncssh.read_known_hosts(known_hosts_path)
            if Path(known_hosts_path).is_file()
            else asyncssh.import_known_hosts("")
        )
        client = _KeyCheckingClient(known_hosts, self._accept_new)
        tried = self._describe(options)
        try:
            conn, _ = await asyncssh.create_connection(
                lambda: client,
                **self._connect_kwargs(),
                known_hosts=known_hosts,
                connect_timeout=self._connect_timeout_s,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise self._host_key_error(client, tried, known_hosts_path, exc) from exc
        except asyncssh.PermissionDenied as exc:
            raise AuthRefused(
                f"{tried}: the server refused the key(s) offered ({exc.reason})",
                field="[host] identity_file",
                fix="add your public key to the host's ~/.ssh/authorized_keys or point "
                "identity_file at the key it accepts",
            ) from exc
        except (TimeoutError, asyncssh.DisconnectError, OSError) as exc:
            raise await self._unreachable(exc, client, options, known_hosts, known_hosts_path) from exc
        if client.verdict == "accepted" and client.offered_key is not None:
            _append_known_host(known_hosts_path, client.matched_name, client.offered_key)
        return conn

    async def _unreachable(
        self,
        exc: Exception,
        client: _KeyCheckingClient,
        options: asyncssh.SSHClientConnectionOptions,
        known_hosts: asyncssh.SSHKnownHosts,
        known_hosts_path: str,
    ) -> HostError:
        """Why the connection failed: a changed host key behind a reset handshake, else the
        host did not answer."""
        tried = self._describe(options)
        offered = await self._changed_key_behind_failure(known_hosts, options)
        if offered is not None:
            client.offered_key, client.verdict = offered, "changed"
            port = options.port
            client.matched_name = options.host if port == 22 else f"[{options.host}]:{port}"
            return self._host_key_error(client, tried, known_hosts_path, exc)
        reason = (
            f"no answer within {self._connect_timeout_s} s"
            if isinstance(exc, TimeoutError)
            else str(exc) or type(exc).__name__
        )
        return HostUnreachable(
            f"{tried}: {reason}",
            field="[host] target",
            fix="check the host name/port, that sshd runs there and the network path",
        )

    async def _changed_key_behind_failure(
        self, known_hosts: asyncssh.SSHKnownHosts, options: asyncssh.SSHClientConnectionOptions
    ) -> asyncssh.SSHKey | None:
        """A server whose key type differs from every recorded one resets the handshake
        ("no matching host key type") instead of showing its key. When keys are
        recorded for this host, fetch the server's key unverified, only to tell the user
        "changed" instead of "unreachable"; the connection is refused either way."""
        port = options.port
        recorded = known_hosts.match(options.host, "", None if port == 22 else port)[0]
        if not recorded:
            return None
        probe_kwargs = {k: v for k, v in self._connect_kwargs().items() if k in ("host", "port", "config")}
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                key = await asyncssh.get_server_host_key(**probe_kwargs)
        except (asyncssh.Error, OSError, TimeoutError):
            return None
        return key if key is not None and key not in recorded else None

    def _host_key_error(
        self, client: _KeyCheckingClient, tried: str, known_hosts_path: str, exc: Exception
    ) -> HostError:
        if client.offered_key is None:  # a ProxyJump hop's key, checked by its own config
            return HostKeyUnknown(
                f"{tried}: a jump host's key could not be verified ({exc})",
                field="[host] ssh_config",
                fix="add the jump host's key to the known_hosts file its ssh_config entry uses "
                "(`ssh-keyscan -p PORT HOST`, after checking it)",
            )
        fingerprint = client.offered_key.get_fingerprint()
        if client.verdict == "changed":
            return HostKeyChanged(
                f"{tried}: the host key ({fingerprint}) differs from the one recorded in "
                f"{known_hosts_path}; refusing to connect (this may be a man in the middle)",
                field="[host] known_hosts",
                fix="if the host was really reinstalled, remove its old line with "
                f"`ssh-keygen -R '{client.matched_name}' -f {known_hosts_path}` and connect again",
            )
        return HostKeyUnknown(
            f"{tried}: host key {fingerprint} is not in {known_hosts_path} ({exc})",
            field="[host] accept_new_host_key",
            fix="set `[host] accept_new_host_key = true` to record it on first use, or add it "
            f"yourself: `ssh-keyscan -p PORT HOST >> {known_hosts_path}` after checking it",
        )

    async def _connection(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._sftp, self._agent_proc = None, None
                self._conn = await self._connect()
            return self._conn

    async def _sftp_client(self) -> asyncssh.SFTPClient:
        conn = await self._connection()
        if self._sftp is None:
            with self._dropped_is_lost("start sftp"):
                self._sftp = await conn.start_sftp_client()
        return self._sftp

    @contextmanager
    def _dropped_is_lost(self, action: str) -> Iterator[None]:
        """Turn "the connection went away" (from whichever layer) into HostConnectionLost."""
        try:
            yield
        except _DROPPED as exc:
            self._drop_connection()
            raise HostConnectionLost(
                f"{action} on {self.target}: the connection dropped ({exc or type(exc).__name__})"
            ) from exc
        except asyncssh.ChannelOpenError as exc:
            if self._conn is not None and self._conn.is_closed():
                self._drop_connection()
                raise HostConnectionLost(
                    f"{action} on {self.target}: the connection had dropped ({exc.reason})"
                ) from exc
            raise HostError(
                f"{action} on {self.target}: the server refused a channel "
                f"({exc.reason}); check MaxSessions in its sshd_config"
            ) from exc

    def _drop_connection(self) -> None:
        """Abandon a broken connection (and what ran over it); the next operation reconnects."""
        conn, self._conn, self._sftp, self._agent_proc = self._conn, None, None, None
        if conn is not None:
            conn.abort()

    async def _forget_connection(self) -> None:
        self._drop_connection()

    async def close(self) -> None:
        self._stop_agent()
        conn, self._conn, self._sftp = self._conn, None, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()

    # --- commands -----------------------------------------------------------------
    def _agent_command(self) -> str:
        return shlex.join([self._python, "-I", "-c", AGENT_SOURCE])

    async def _agent_process(self) -> asyncssh.SSHClientProcess[bytes]:
        """The connection's long-lived agent: one login shell and Python start per
        connection instead of per operation (each costs ~0.1-0.5 s on a typical host)."""
        for attempt in range(2):
            conn = await self._connection()
            if self._agent_proc is not None and not self._agent_proc.is_closing():
                return self._agent_proc
            with self._dropped_is_lost("start host agent"):
                try:
                    self._agent_proc = await conn.create_process(self._agent_command(), encoding=None)
                    return self._agent_proc
                except asyncssh.ChannelOpenError:
                    if attempt > 0 or not conn.is_closed():
                        raise
        raise AssertionError("unreachable: the loop returns or raises")

    async def _agent_answer(self, operation: str, args: Mapping[str, Any]) -> dict[str, Any]:
        action = f"host agent ({operation})"
        async with self._agent_lock:
            agent = await self._agent_process()
            with self._dropped_is_lost(action):
                try:
                    agent.stdin.write(agent_request(operation, args))
                    async with asyncio.timeout(AGENT_TIMEOUT_S):
                        line = await agent.stdout.readline()
                except TimeoutError:
                    self._stop_agent()
                    raise HostTimeout(
                        f"{action} on {self.target}: no answer within "
                        f"{AGENT_TIMEOUT_S} s; the agent was stopped"
                    ) from None
                except BaseException:
                    # Cancelled mid-exchange: its answer would reach the next caller.
                    self._stop_agent()
                    raise
            if not line:
                raise await self._agent_died(action, agent)
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def _agent_died(self, action: str, agent: asyncssh.SSHClientProcess[bytes]) -> HostError:
        self._agent_proc = None
        if self._conn is None or self._conn.is_closed():
            await self._forget_connection()
            return HostConnectionLost(f"{action} on {self.target}: the connection dropped")
        async with asyncio.timeout(CLEANUP_TIMEOUT_S):
            done = await agent.wait()
        stderr = _as_bytes(done.stderr)
        if done.exit_status is None and done.exit_signal is None:
            await self._forget_connection()
            return HostConnectionLost(f"{action} on {self.target}: the connection dropped")
        if done.exit_status == _EXIT_NOT_FOUND:
            return RemoteCommandNotFound(
                f"{action} on {self.target}: `{self._python}` not found; specpilot needs "
                "Python 3.7+ on the PATH of the host's login shell"
            )
        return CommandFailed(
            f"{action} on {self.target}: the host agent exited ({done.exit_status}): {stderr_tail(stderr)}",
            returncode=done.exit_status if done.exit_status is not None else -1,
            stderr=stderr,
        )

    def _stop_agent(self) -> None:
        agent, self._agent_proc = self._agent_proc, None
        if agent is not None:
            agent.close()

    async def _run_command(
        self, command: str, shown: str, stdin: bytes | None, wait_s: float | None
    ) -> asyncssh.SSHCompletedProcess:
        """Run one command string to completion. Reconnects once when the connection
        turns out to have died before the channel opened (nothing ran remotely, so
        running it again is safe). stdin always ends (EOF), as a local DEVNULL would."""
        action = f"run {shown}"
        for attempt in range(2):
            conn = await self._connection()
            with self._dropped_is_lost(action):
                try:
                    process = await conn.create_process(command, encoding=None)
                except asyncssh.ChannelOpenError:
                    if attempt > 0 or not conn.is_closed():
                        raise
                    continue
                if stdin:
                    process.stdin.write(stdin)
                process.stdin.write_eof()
                try:
                    async with asyncio.timeout(wait_s):
                        done = await process.wait()
                except TimeoutError:
                    process.close()
                    raise HostTimeout(
                        f"{action} on {self.target}: no exit after {wait_s} s (not even from "
                        "the host-side `timeout`); closed the channel, it may still run there"
                    ) from None
            if done.exit_status is None and done.exit_signal is None:
                # The channel closed without an exit status: the connection went away.
                await self._forget_connection()
                raise HostConnectionLost(
                    f"{action} on {self.target}: the connection dropped before the command "
                    "finished; it may or may not have completed there"
                )
            return done
        raise AssertionError("unreachable: the loop returns or raises")

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
        if not argv:
            raise ValueError("run needs a non-empty argv")
        command_argv = remote_argv(argv, env=env, cwd=cwd)
        if timeout_s is not None:
            # sshd here may refuse "signal" requests (it does without privilege separation
            # for the session), and closing the channel does not stop a silent command: the
            # host's own `timeout` enforces the limit, TERM then KILL, on its process group.
            command_argv = ["timeout", "-k", f"{TIMEOUT_KILL_AFTER_S:g}", f"{timeout_s:g}", *command_argv]
        shown = shown_argv(argv)
        started = time.monotonic()
        wait_s = None if timeout_s is None else timeout_s + TIMEOUT_KILL_AFTER_S + 10.0
        done = await self._run_command(shlex.join(command_argv), shown, stdin, wait_s)
        if (
            timeout_s is not None
            and done.exit_status in _TIMEOUT_EXITS
            and time.monotonic() - started >= timeout_s
        ):
            raise HostTimeout(
                f"run {shown} on {self.target}: no exit after {timeout_s} s; stopped it. "
                "Raise the timeout or find out why it hangs"
            )
        status = done.returncode if done.returncode is not None else -1
        result = RunResult(tuple(argv), status, _as_bytes(done.stdout), _as_bytes(done.stderr))
        if check:
            self._raise_for_status(result, shown)
        return result

    def _raise_for_status(self, result: RunResult, shown: str) -> None:
        """`check`: a command not found, not executable or failing is an error."""
        status, program = result.returncode, result.argv[0]
        if status == _EXIT_NOT_FOUND:
            raise RemoteCommandNotFound(
                f"run {shown} on {self.target}: {program} not found "
                f"({stderr_tail(result.stderr)}); install it or give its absolute path"
            )
        if status == _EXIT_NOT_EXECUTABLE:
            raise PermissionDenied(
                f"run {shown} on {self.target}: {program} is not executable ({stderr_tail(result.stderr)})"
            )
        if status != 0:
            raise CommandFailed(
                f"run {shown} on {self.target}: exit status {status}: {stderr_tail(result.stderr)}",
                returncode=status,
                stderr=result.stderr,
            )

    async def home(self) -> str:
        if self._home is None:
            sftp = await self._sftp_client()
            with self._dropped_is_lost("find home"):
                self._home = str(await sftp.realpath("."))
        return self._home

    # --- files --------------------------------------------------------------------
    def _sftp_error(self, exc: asyncssh.SFTPError, action: str, path: str) -> HostError:
        if isinstance(exc, _SFTP_DROPPED):
            self._drop_connection()
            return HostConnectionLost(
                f"{action} on {self.target}: the connection dropped ({exc.reason}) ({path})"
            )
        if isinstance(exc, asyncssh.SFTPPermissionDenied):
            return error_from_os(errno.EACCES, exc.reason, target=self.target, action=action, filename=path)
        if isinstance(exc, asyncssh.SFTPNoSuchFile):
            return error_from_os(errno.ENOENT, exc.reason, target=self.target, action=action, filename=path)
        return HostError(f"{action} on {self.target}: {exc.reason} ({path})")

    async def _free_bytes(self, directory: str) -> int | None:
        sftp = await self._sftp_client()
        with self._dropped_is_lost(f"statvfs {directory}"):
            try:
                stats = await sftp.statvfs(directory)
            except _SFTP_DROPPED:
                raise
            except asyncssh.SFTPError:
                return None  # server without statvfs@openssh.com: rely on write errors
        return int(stats.bavail * stats.frsize)

    def _disk_full(self, directory: str, size_bytes: int, free_bytes: int) -> DiskFull:
        return DiskFull(
            f"put into {directory} on {self.target}: needs {size_bytes} bytes, {free_bytes} "
            "free; free space there or choose another directory"
        )

    async def _prepare_dir(self, directory: str, size_bytes: int) -> None:
        sftp = await self._sftp_client()
        with self._dropped_is_lost(f"create {directory}"):
            try:
                await sftp.makedirs(directory, exist_ok=True)
            except asyncssh.SFTPError as exc:
                raise self._sftp_error(exc, "create directory", directory) from exc
        free_bytes = await self._free_bytes(directory)
        if free_bytes is not None and free_bytes < size_bytes:
            raise self._disk_full(directory, size_bytes, free_bytes)

    async def _write_temp(self, temp_path: str, data: bytes, mode: int) -> None:
        sftp = await self._sftp_client()
        with self._dropped_is_lost(f"write {temp_path}"):
            try:
                async with sftp.open(temp_path, "xb", asyncssh.SFTPAttrs(permissions=0o600)) as handle:
                    await handle.write(data)
                    await handle.fsync()
                await sftp.chmod(temp_path, mode)
            except _SFTP_DROPPED:
                raise
            except asyncssh.SFTPFailure as exc:
                # SFTP v3 reports ENOSPC as a bare "Failure": ask the file system.
                await self._remove_quietly(temp_path)
                directory = temp_path.rsplit("/", 1)[0] or "/"
                free_bytes = await self._free_bytes(directory)
                if free_bytes is not None and free_bytes < len(data):
                    raise self._disk_full(directory, len(data), free_bytes) from exc
                raise self._sftp_error(exc, "write", temp_path) from exc
            except asyncssh.SFTPError as exc:
                raise self._sftp_error(exc, "write", temp_path) from exc

    async def _rename(self, temp_path: str, path: str) -> None:
        sftp = await self._sftp_client()
        with self._dropped_is_lost(f"rename to {path}"):
            try:
                await sftp.posix_rename(temp_path, path)
            except asyncssh.SFTPError as exc:
                raise self._sftp_error(exc, f"rename to {path}", temp_path) from exc

    async def _remove_quietly(self, path: str) -> None:
        try:
            async with asyncio.timeout(CLEANUP_TIMEOUT_S):
                sftp = await self._sftp_client()
                await sftp.remove(path)
        except (HostError, asyncssh.Error, OSError, TimeoutError):
            return

    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        sftp = await self._sftp_client()
        with self._dropped_is_lost(f"read {path}"):
            try:
                async with sftp.open(path, "rb") as handle:
                    if limit is None:
                        # asyncssh's read-to-the-end asks for (size - offset) bytes, a negative
                        # length (OverflowError) where the file is now shorter than the offset
                        limit = max((await handle.stat()).size or 0, offset) - offset
                    return _as_bytes(await handle.read(limit, offset)) if limit else b""
            except asyncssh.SFTPNoSuchFile as exc:
                raise FileNotFoundError(errno.ENOENT, f"not found on {self.target}", path) from exc
            except asyncssh.SFTPError as exc:
                raise self._sftp_error(exc, "read", path) from exc

    async def follow(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
        conn = await self._connection()
        with self._dropped_is_lost(f"follow {path}"):
            process = await conn.create_process(self._agent_command(), encoding=None)
            process.stdin.write(agent_request("follow", {"path": path, "offset": offset}))
            try:
                while True:
                    chunk = await process.stdout.read(1 << 16)
                    if not chunk:
                        stderr = await process.stderr.read()
                        raise HostError(
                            f"follow {path} on {self.target}: the reader stopped: "
                            f"{stderr_tail(_as_bytes(stderr))}"
                        )
                    yield _as_bytes(chunk)
            finally:
                # EOF on its stdin is the agent's signal to exit; no stray tail survives us.
                if not process.is_closing():
                    process.stdin.write_eof()
                process.close()


def remote_argv(argv: Sequence[str], *, env: Mapping[str, str] | None, cwd: str | None) -> list[str]:
    """The argv the remote login shell must run: env assignments through `env`, cwd
    through a fixed `sh -c` script. Joined with shlex.join, never concatenated."""
    command = list(argv)
    if env:
        check_env_names(env)
        command = ["env", *(f"{name}={value}" for name, value in env.items()), *command]
    if cwd is not None:
        command = ["sh", "-c", _CD_THEN_EXEC, "sh", cwd, *command]
    return command


def _append_known_host(path: str, name: str, key: asyncssh.SSHKey) -> None:
    """Record a key accepted on first use, the way `ssh` does."""
    known = Path(path)
    known.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    algorithm, blob = key.export_public_key("openssh").decode().split()[:2]
    with known.open("a") as handle:
        handle.write(f"{name} {algorithm} {blob}\n")


def _as_bytes(value: bytes | str | None) -> bytes:
    """asyncssh types process output as str|bytes; with encoding=None it is bytes."""
    if value is None:
        return b""
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
