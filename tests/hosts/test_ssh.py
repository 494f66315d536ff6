"""What only SSH can get wrong: host keys, auth, reachability, aliases, dropped links."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from specpilot.errors import UserError
from specpilot.hosts import Host, open_host
from specpilot.hosts.errors import (
    AuthRefused,
    HostConnectionLost,
    HostKeyChanged,
    HostKeyUnknown,
    HostUnreachable,
    RemoteCommandNotFound,
)
from tests.fixtures.ports import free_port
from tests.fixtures.sshd import SshdServer
from tests.hosts.conftest import drive, leftovers, ssh_host

pytestmark = pytest.mark.sshd


def _echo(host: Host) -> object:
    async def body() -> bytes:
        return (await host.run(["echo", "ok"])).stdout

    return body()


def _cmdline(pid: int) -> bytes:
    """A process's cmdline, b"" once it has gone (processes come and go while we look)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _other_public_key(tmp_path: Path) -> str:
    key = tmp_path / "otherkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return " ".join((tmp_path / "otherkey.pub").read_text().split()[:2])


# --- host keys --------------------------------------------------------------------


def test_a_changed_host_key_is_refused(sshd: SshdServer, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {_other_public_key(tmp_path)}\n")
    for accept in (False, True):  # accepting *new* keys never accepts a *changed* one
        with pytest.raises(HostKeyChanged) as caught:
            drive(lambda a=accept: ssh_host(sshd, known_hosts=str(known_hosts), accept_new_host_key=a), _echo)
        assert isinstance(caught.value, UserError)
        assert "ssh-keygen -R" in str(caught.value)
        assert "SHA256:" in str(caught.value)
    assert sshd.host_public_key not in known_hosts.read_text()


def test_a_host_key_of_another_type_is_changed_not_unreachable(sshd: SshdServer, tmp_path: Path) -> None:
    """Only an RSA key recorded, the server has ed25519: the handshake fails outright."""
    key = tmp_path / "rsakey"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(key)], check=True)
    known_hosts = tmp_path / "known_hosts"
    rsa_public = " ".join((tmp_path / "rsakey.pub").read_text().split()[:2])
    known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {rsa_public}\n")
    with pytest.raises(HostKeyChanged):
        drive(lambda: ssh_host(sshd, known_hosts=str(known_hosts)), _echo)


def test_an_unknown_host_key_needs_explicit_acceptance(sshd: SshdServer, tmp_path: Path) -> None:
    known_hosts = tmp_path / "ssh" / "known_hosts"
    with pytest.raises(HostKeyUnknown) as caught:
        drive(lambda: ssh_host(sshd, known_hosts=str(known_hosts)), _echo)
    message = str(caught.value)
    assert "accept_new_host_key = true" in message and "ssh-keyscan" in message
    assert not known_hosts.exists()

    accepted = drive(lambda: ssh_host(sshd, known_hosts=str(known_hosts), accept_new_host_key=True), _echo)
    assert accepted == b"ok\n"
    assert known_hosts.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_public_key}\n"
    # Now recorded: a plain connection verifies against it.
    assert drive(lambda: ssh_host(sshd, known_hosts=str(known_hosts)), _echo) == b"ok\n"


# --- reachability and auth -----------------------------------------------------------


def test_a_closed_port_is_unreachable(sshd: SshdServer) -> None:
    closed_port = free_port()
    with pytest.raises(HostUnreachable) as caught:
        drive(
            lambda: open_host(
                f"ssh://{sshd.user}@127.0.0.1:{closed_port}",
                identity_file=sshd.identity_file,
                known_hosts=sshd.known_hosts,
            ),
            _echo,
        )
    assert caught.value.exit_code == 2
    assert f"127.0.0.1:{closed_port}" in str(caught.value)


def test_a_wrong_key_is_auth_refused(sshd: SshdServer, tmp_path: Path) -> None:
    _other_public_key(tmp_path)
    with pytest.raises(AuthRefused) as caught:
        drive(lambda: ssh_host(sshd, identity_file=str(tmp_path / "otherkey")), _echo)
    assert "authorized_keys" in str(caught.value)


def test_a_missing_identity_file_names_the_field(sshd: SshdServer, tmp_path: Path) -> None:
    with pytest.raises(UserError) as caught:
        drive(lambda: ssh_host(sshd, identity_file=str(tmp_path / "nokey")), _echo)
    assert str(caught.value).startswith("[host] identity_file:")


# --- ssh_config aliases ------------------------------------------------------------


def _write_ssh_config(sshd: SshdServer, path: Path) -> None:
    block = (
        "  HostName 127.0.0.1\n"
        f"  Port {sshd.port}\n"
        f"  User {sshd.user}\n"
        f"  IdentityFile {sshd.identity_file}\n"
        f"  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    path.write_text(
        f"Host gpu-direct\n{block}\n"
        f"Host bastion\n{block}\n"
        f"Host gpu-behind-bastion\n{block}  ProxyJump bastion\n"
    )


def test_an_ssh_config_alias_is_honoured(sshd: SshdServer, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    _write_ssh_config(sshd, config)
    assert drive(lambda: open_host("gpu-direct", ssh_config=str(config)), _echo) == b"ok\n"


def test_proxy_jump_goes_through_the_jump_host(sshd: SshdServer, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    _write_ssh_config(sshd, config)
    log = sshd.workdir / "sshd.log"

    def logins() -> int:
        return log.read_text().count("Accepted publickey")

    async def body(host: Host) -> bytes:
        return (await host.run(["echo", "ok"])).stdout

    before = logins()
    assert drive(lambda: open_host("gpu-direct", ssh_config=str(config)), body) == b"ok\n"
    direct = logins() - before
    assert drive(lambda: open_host("gpu-behind-bastion", ssh_config=str(config)), body) == b"ok\n"
    # Two logins per connection through the jump host (bastion, then the final hop
    # over its forwarded channel), one without.
    assert (direct, logins() - before - direct) == (1, 2)


# --- dropped connections -----------------------------------------------------------


def _cutting_write(host: Host, sshd: SshdServer, cut_attempts: int) -> list[str]:
    """Replace the host's write step: for the first `cut_attempts` attempts, kill every
    sshd session as soon as the temp file has bytes on disk (mid-transfer)."""
    attempts: list[str] = []
    write_temp = host._write_temp  # type: ignore[attr-defined]

    async def cut(temp_path: str, data: bytes, mode: int) -> None:
        attempts.append(temp_path)
        if len(attempts) > cut_attempts:
            await write_temp(temp_path, data, mode)
            return
        writing = asyncio.ensure_future(write_temp(temp_path, data, mode))
        for _ in range(2000):
            if os.path.exists(temp_path) and os.path.getsize(temp_path) > 0:
                break
            await asyncio.sleep(0.002)
        assert sshd.kill_sessions(), "no sshd session to cut"
        await writing

    host._write_temp = cut  # type: ignore[attr-defined]
    return attempts


def test_a_connection_killed_mid_transfer_is_retried(sshd: SshdServer, tmp_path: Path) -> None:
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"old")
    data = os.urandom(24 * 1024 * 1024)

    async def body(host: Host) -> list[str]:
        attempts = _cutting_write(host, sshd, cut_attempts=1)
        await host.put(str(target), data)
        return attempts

    attempts = drive(lambda: ssh_host(sshd), body)
    assert len(attempts) == 2
    assert target.read_bytes() == data
    assert leftovers(tmp_path, target.name) == []


def test_a_connection_that_keeps_dropping_fails_cleanly(sshd: SshdServer, tmp_path: Path) -> None:
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"old")

    async def body(host: Host) -> list[str]:
        attempts = _cutting_write(host, sshd, cut_attempts=99)
        try:
            await host.put(str(target), os.urandom(24 * 1024 * 1024))
        finally:
            pass
        return attempts

    with pytest.raises(HostConnectionLost) as caught:
        drive(lambda: ssh_host(sshd), body)
    assert "3 attempts" in str(caught.value)
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path, target.name) == []


def test_a_drop_during_a_command_is_reported_and_the_next_command_reconnects(
    sshd: SshdServer,
) -> None:
    def running_sleep() -> bool:
        return any(_cmdline(pid) == b"sleep\x0030\x00" for pid in sshd.session_pids())

    async def body(host: Host) -> bytes:
        command = asyncio.ensure_future(host.run(["sleep", "30"]))
        for _ in range(400):
            if running_sleep():
                break
            await asyncio.sleep(0.01)
        sshd.kill_sessions()
        with pytest.raises(HostConnectionLost):
            await command
        # Killed while the loop may not have noticed yet: the next command reconnects.
        sshd.kill_sessions()
        return (await host.run(["echo", "again"])).stdout

    assert drive(lambda: ssh_host(sshd), body) == b"again\n"


def test_follow_leaves_no_reader_behind(sshd: SshdServer, tmp_path: Path) -> None:
    log_path = tmp_path / "log"
    log_path.write_bytes(b"line\n")

    def agent_readers() -> list[int]:
        return [pid for pid in sshd.session_pids() if b"host-side work" in _cmdline(pid)]

    async def body(host: Host) -> list[int]:
        before = set(agent_readers())
        stream = host.follow(str(log_path))
        assert await stream.__anext__() == b"line\n"
        assert set(agent_readers()) - before, "the remote reader process was not found"
        await stream.aclose()  # type: ignore[attr-defined]
        for _ in range(100):
            if not set(agent_readers()) - before:
                break
            await asyncio.sleep(0.05)
        return sorted(set(agent_readers()) - before)

    assert drive(lambda: ssh_host(sshd), body) == []


def test_a_host_without_the_python_is_command_not_found(sshd: SshdServer) -> None:
    def no_python() -> Host:
        host = ssh_host(sshd)
        host._python = "specpilot-no-such-python"  # type: ignore[attr-defined]
        return host

    with pytest.raises(RemoteCommandNotFound) as caught:
        drive(no_python, lambda host: host.pid_alive(1))
    assert "specpilot-no-such-python" in str(caught.value)


def test_a_cancelled_agent_call_does_not_shift_later_answers(sshd: SshdServer) -> None:
    """A caller that gives up mid-exchange must not leave its answer for the next caller."""

    async def body(host: Host) -> list[tuple[bool, bool]]:
        answers = []
        await host.pid_alive(1)  # the agent is up: the cancels below land mid-exchange
        for step in range(4):
            pending = asyncio.ensure_future(host.port_owner(sshd.port))  # a /proc scan: slow
            await asyncio.sleep(0.002 * step)
            pending.cancel()
            answers.append((await host.pid_alive(4_100_000), await host.pid_alive(os.getpid())))
        return answers

    assert drive(lambda: ssh_host(sshd), body) == [(False, True)] * 4
