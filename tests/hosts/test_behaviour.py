"""One behavioural suite for LocalHost and SSHHost (a real loopback sshd)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specpilot.hosts import Host, LocalHost
from specpilot.hosts.errors import (
    CommandFailed,
    DiskFull,
    HostTimeout,
    RemoteCommandNotFound,
    TransferCorrupted,
)
from tests.hosts.conftest import HostFactory, drive, leftovers

# Every argument a shell would rewrite if it ever saw it as text.
METACHARACTER_ARGS = [
    "model dir/with spaces",
    "it's",
    'say "hi"',
    "$HOME",
    "${PATH}",
    "`id`",
    "$(id)",
    "line1\nline2",
    "*",
    "?.txt",
    "[ab]",
    "semi;colon",
    "pipe|x",
    "&&",
    "back\\slash",
    "",
    "-n",
    "--flag=$x",
    "tab\there",
    "ünïcödé",
    "~",
    "#comment",
    "{a,b}",
    "!bang",
    "a'b\"c$d`e",
]
METACHARACTER_ENV = {
    "PATH": os.environ["PATH"],
    "MODEL_PATH": '/models/My Model\'s "v2" $(rm -rf ~)',
    "MULTI_LINE": "first\nsecond\n",
    "GLOB": "*.safetensors",
    "EMPTY": "",
}
SLEEP_ARGV = [sys.executable, "-c", "import time; time.sleep(60)"]


def _pids_running(cmdline: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == cmdline:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _process_children(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(entry.name))
    return children


async def _wait_until_dead(host: Host, pids: list[int]) -> list[int]:
    """Pids still alive after up to 10 s (a guard, not a speed assertion)."""
    for _ in range(200):
        alive = [pid for pid in pids if await host.pid_alive(pid)]
        if not alive:
            return []
        await asyncio.sleep(0.05)
    return alive


# --- put -------------------------------------------------------------------------


def test_put_writes_exact_bytes_mode_and_creates_parents(make_host: HostFactory, tmp_path: Path) -> None:
    target = tmp_path / "new dir" / "launch script.sh"
    data = os.urandom(300_000)

    async def body(host: Host) -> None:
        result = await host.put(str(target), data, mode=0o750)
        assert result.sha256 == hashlib.sha256(data).hexdigest()
        assert result.size_bytes == len(data)
        assert await host.sha256(str(target)) == result.sha256
        assert await host.sha256(str(tmp_path / "missing")) is None
        assert await host.read_bytes(str(target), offset=10, limit=5) == data[10:15]

    drive(make_host, body)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert leftovers(target.parent, target.name) == []


def test_put_replaces_an_existing_file(make_host: HostFactory, tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    target.write_bytes(b"old")
    drive(make_host, lambda host: host.put(str(target), b"new contents"))
    assert target.read_bytes() == b"new contents"


def test_read_bytes_from_past_the_end_is_empty(make_host: HostFactory, tmp_path: Path) -> None:
    """A log shorter than the offset recorded at ready (truncated, or written again by a new
    run of the same name): nothing to read. Over SFTP a whole-file read from there once asked
    for a negative length and `status` ended in "unexpected OverflowError"."""
    target = tmp_path / "engine.log"
    target.write_bytes(b"short\n")

    async def body(host: Host) -> tuple[bytes, bytes, bytes]:
        path = str(target)
        return (
            await host.read_bytes(path, 100),
            await host.read_bytes(path, 100, 5),
            await host.read_bytes(path, 6),
        )

    assert drive(make_host, body) == (b"", b"", b"")


def test_read_bytes_of_a_missing_file_is_file_not_found(make_host: HostFactory, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        drive(make_host, lambda host: host.read_bytes(str(tmp_path / "nope")))


@pytest.mark.parametrize("fault", ["truncated", "flipped_byte", "modified_before_rename"])
def test_a_corrupted_transfer_is_caught_and_the_target_kept(
    make_host: HostFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    target = tmp_path / "serve.sh"
    target.write_bytes(b"the old, good script\n")
    data = os.urandom(200_000)

    async def body(host: Host) -> None:
        write_temp = host._write_temp  # type: ignore[attr-defined]

        async def faulty_write(temp_path: str, payload: bytes, mode: int) -> None:
            if fault == "truncated":  # the stream was cut on the far side
                await write_temp(temp_path, payload[: len(payload) // 2], mode)
            elif fault == "flipped_byte":
                flipped = bytearray(payload)
                flipped[1234] ^= 0x01
                await write_temp(temp_path, bytes(flipped), mode)
            else:  # something rewrites the file between write and rename
                await write_temp(temp_path, payload, mode)
                await host.run(["sh", "-c", 'printf X >> "$1"', "sh", temp_path])

        monkeypatch.setattr(host, "_write_temp", faulty_write)
        await host.put(str(target), data)

    with pytest.raises(TransferCorrupted) as caught:
        drive(make_host, body)
    message = str(caught.value)
    assert hashlib.sha256(data).hexdigest() in message
    assert f"{len(data)} bytes" in message
    assert "sha256 " in message.split("far side's copy")[1]
    assert target.read_bytes() == b"the old, good script\n"
    assert leftovers(tmp_path, target.name) == []


def test_a_full_disk_is_disk_full_and_the_target_kept(make_host: HostFactory, tiny_fs: Path) -> None:
    target = tiny_fs / "weights.bin"
    target.write_bytes(b"old" * 1000)
    with pytest.raises(DiskFull) as caught:
        drive(make_host, lambda host: host.put(str(target), os.urandom(200_000)))
    assert "200000 bytes" in str(caught.value)
    assert target.read_bytes() == b"old" * 1000
    assert leftovers(tiny_fs, target.name) == []


def test_a_write_that_runs_out_of_space_midway_is_disk_full(
    make_host: HostFactory, tiny_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Space checked up front can vanish before the write: the write error itself counts."""
    target = tiny_fs / "weights.bin"
    target.write_bytes(b"old")

    async def body(host: Host) -> None:
        async def no_precheck(directory: str, size_bytes: int) -> None:
            return None

        monkeypatch.setattr(host, "_prepare_dir", no_precheck)
        await host.put(str(target), os.urandom(200_000))

    with pytest.raises(DiskFull):
        drive(make_host, body)
    assert target.read_bytes() == b"old"
    assert leftovers(tiny_fs, target.name) == []


# --- run -------------------------------------------------------------------------


def test_run_passes_argv_env_cwd_and_stdin_exactly(make_host: HostFactory, tmp_path: Path) -> None:
    workdir = tmp_path / "a dir with $pace 'and' `ticks`"
    workdir.mkdir()

    async def body(host: Host) -> None:
        printed = await host.run(["printf", "%s\\0", *METACHARACTER_ARGS])
        assert printed.stdout.split(b"\0")[:-1] == [a.encode() for a in METACHARACTER_ARGS]
        env = {"MODEL_PATH": METACHARACTER_ENV["MODEL_PATH"], "MULTI": "a\nb"}
        echoed = await host.run(["sh", "-c", 'printf "%s|%s" "$MODEL_PATH" "$MULTI"'], env=env)
        assert echoed.stdout.decode() == f"{env['MODEL_PATH']}|a\nb"
        where = await host.run(["pwd"], cwd=str(workdir))
        assert where.stdout.decode().rstrip("\n") == str(workdir)
        assert (await host.run(["cat"], stdin=b"bytes\0in")).stdout == b"bytes\0in"

    drive(make_host, body)


def test_run_reports_failures_by_type(make_host: HostFactory) -> None:
    async def body(host: Host) -> None:
        with pytest.raises(RemoteCommandNotFound):
            await host.run(["specpilot-no-such-program", "x"])
        missing = await host.run(["specpilot-no-such-program"], check=False)
        assert missing.returncode == 127
        with pytest.raises(CommandFailed) as failed:
            await host.run(["sh", "-c", "echo boom >&2; exit 3"])
        assert failed.value.returncode == 3
        assert "boom" in str(failed.value)
        assert (await host.run(["sh", "-c", "exit 4"], check=False)).returncode == 4
        assert (await host.run(["cat"])).stdout == b""  # stdin ends: nothing waits on it
        with pytest.raises(HostTimeout):
            await host.run(["sleep", "37.25"], timeout_s=0.5)
        for _ in range(100):  # the timed-out command was stopped, not left behind
            if not _pids_running(b"sleep\x0037.25\x00"):
                break
            await asyncio.sleep(0.05)
        assert _pids_running(b"sleep\x0037.25\x00") == []

    drive(make_host, body)


def test_errors_do_not_show_secret_flag_values(make_host: HostFactory) -> None:
    with pytest.raises(CommandFailed) as failed:
        drive(
            make_host,
            lambda host: host.run(["sh", "-c", "exit 1", "--api-key", "sk-SECRET1", "--hf-token=SECRET2"]),
        )
    assert "SECRET" not in str(failed.value)


# --- processes -------------------------------------------------------------------


def test_spawn_detached_round_trips_argv_and_env_exactly(make_host: HostFactory, tmp_path: Path) -> None:
    argv = [*SLEEP_ARGV, *METACHARACTER_ARGS]
    log_path, pid_path = tmp_path / "server log.txt", tmp_path / "server.pid"

    async def body(host: Host) -> None:
        pid = await host.spawn_detached(
            argv,
            env=METACHARACTER_ENV,
            cwd=str(tmp_path),
            log_path=str(log_path),
            pid_path=str(pid_path),
            exit_path=str(tmp_path / "exit"),
        )
        try:
            assert pid_path.read_text().strip() == str(pid)
            assert await host.proc_argv(pid) == argv
            assert await host.proc_env(pid) == METACHARACTER_ENV
            assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # a new session
            assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)
            assert await host.pid_alive(pid)
        finally:
            assert await host.signal_group(pid, signal.SIGKILL)
        assert await _wait_until_dead(host, [pid]) == []
        assert await host.proc_argv(pid) in (None, [])  # gone, or a zombie without argv

    drive(make_host, body)


async def _recorded_exit(host: Host, exit_path: str) -> int | None:
    """The watcher's record, polled for up to 10 s (a guard, not a speed assertion)."""
    for _ in range(200):
        returncode = await host.exit_status(exit_path)
        if returncode is not None:
            return returncode
        await asyncio.sleep(0.05)
    return None


@pytest.mark.parametrize(("script", "expected"), [("exit 3", 3), ("kill -9 $$", -9), ("exit 0", 0)])
def test_the_watcher_records_how_the_process_ended(
    make_host: HostFactory, tmp_path: Path, script: str, expected: int
) -> None:
    exit_path = tmp_path / "exit"
    exit_path.write_text('{"returncode": 42}\n')  # an earlier run's record must not be read as this one's

    async def body(host: Host) -> int | None:
        pid = await host.spawn_detached(
            ["sh", "-c", f"sleep 0.3; {script}"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=str(tmp_path),
            log_path=str(tmp_path / "log"),
            pid_path=str(tmp_path / "pid"),
            exit_path=str(exit_path),
        )
        assert await host.exit_status(str(exit_path)) is None  # still running
        assert await _wait_until_dead(host, [pid]) == []
        returncode = await _recorded_exit(host, str(exit_path))
        # the watcher reaped it: no zombie is left behind, whatever init does
        assert await host.proc_stat(pid) is None
        return returncode

    assert drive(make_host, body) == expected


def test_proc_stat_names_the_process_by_its_start_time(make_host: HostFactory, tmp_path: Path) -> None:
    async def body(host: Host) -> None:
        pid = await host.spawn_detached(
            ["sleep", "60"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=str(tmp_path),
            log_path=str(tmp_path / "log"),
            pid_path=str(tmp_path / "pid"),
            exit_path=str(tmp_path / "exit"),
        )
        try:
            stat = await host.proc_stat(pid)
            assert stat is not None and not stat.exited
            assert stat.pgid == pid
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            assert stat.start_ticks == int(fields[19])
            mine = await host.proc_stat(os.getpid())
            assert mine is not None and mine.start_ticks != stat.start_ticks
        finally:
            await host.signal_group(pid, signal.SIGKILL)
        assert await _wait_until_dead(host, [pid]) == []
        # a killed process is a zombie until its watcher reaps it; once the watcher has
        # written the exit record, nothing of it is left (CI once caught the zombie)
        assert await _recorded_exit(host, str(tmp_path / "exit")) == -signal.SIGKILL
        assert await host.proc_stat(pid) is None

    drive(make_host, body)


def test_spawn_detached_appends_output_to_the_log(make_host: HostFactory, tmp_path: Path) -> None:
    log_path = tmp_path / "log"
    log_path.write_text("earlier line\n")

    async def body(host: Host) -> None:
        pid = await host.spawn_detached(
            ["sh", "-c", "echo to-stdout; echo to-stderr >&2"],
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            log_path=str(log_path),
            pid_path=str(tmp_path / "pid"),
            exit_path=str(tmp_path / "exit"),
        )
        await _wait_until_dead(host, [pid])

    drive(make_host, body)
    assert log_path.read_text().splitlines() == ["earlier line", "to-stdout", "to-stderr"]


def test_spawn_of_a_missing_program_fails_loudly_without_a_pid(
    make_host: HostFactory, tmp_path: Path
) -> None:
    pid_path = tmp_path / "pid"
    with pytest.raises(RemoteCommandNotFound) as caught:
        drive(
            make_host,
            lambda host: host.spawn_detached(
                ["specpilot-no-such-server", "--port", "1"],
                env={"PATH": "/usr/bin:/bin"},
                cwd=str(tmp_path),
                log_path=str(tmp_path / "log"),
                pid_path=str(pid_path),
                exit_path=str(tmp_path / "exit"),
            ),
        )
    assert "specpilot-no-such-server" in str(caught.value)
    assert not pid_path.exists()


def test_signal_group_stops_parent_and_child(make_host: HostFactory, tmp_path: Path) -> None:
    async def body(host: Host) -> None:
        pid = await host.spawn_detached(
            ["sh", "-c", "sleep 60 & wait"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=str(tmp_path),
            log_path=str(tmp_path / "log"),
            pid_path=str(tmp_path / "pid"),
            exit_path=str(tmp_path / "exit"),
        )
        children: list[int] = []
        for _ in range(100):
            children = _process_children(pid)
            if children:
                break
            await asyncio.sleep(0.05)
        assert children, "the shell did not start its child"
        assert os.getpgid(children[0]) == pid
        assert await host.signal_group(pid, signal.SIGTERM)
        assert await _wait_until_dead(host, [pid, *children]) == []

    drive(make_host, body)


def test_signal_group_of_no_group_is_false(make_host: HostFactory) -> None:
    unused_pid = 4_000_000  # above pid_max's default ceiling (4194304 is the maximum)
    while Path(f"/proc/{unused_pid}").exists():
        unused_pid += 1
    assert drive(make_host, lambda host: host.signal_group(unused_pid, signal.SIGTERM)) is False


def test_a_zombie_is_not_alive(make_host: HostFactory) -> None:
    child = subprocess.Popen(["true"])  # not reaped until the end: a zombie meanwhile
    try:
        deadline = time.monotonic() + 30  # a guard: `true` ends at once, but not on a busy machine
        while (state := Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z":
            assert time.monotonic() < deadline, f"`true` still in state {state}"
            time.sleep(0.02)
        assert drive(make_host, lambda host: host.pid_alive(child.pid)) is False
        assert drive(make_host, lambda host: host.pid_alive(os.getpid())) is True
    finally:
        child.wait()


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_port_owner_finds_the_listening_process(make_host: HostFactory, family: str) -> None:
    address = "('127.0.0.1', 0)" if family == "ipv4" else "('::1', 0)"
    listener_code = (
        "import socket, sys, time\n"
        f"s = socket.socket(socket.AF_INET{'6' if family == 'ipv6' else ''})\n"
        f"s.bind({address}); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    argv = [sys.executable, "-c", listener_code, "extra arg"]
    listener = subprocess.Popen(argv, stdout=subprocess.PIPE)
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        owner = drive(make_host, lambda host: host.port_owner(port))
        assert owner is not None
        assert owner.pid == listener.pid
        assert list(owner.argv) == argv
    finally:
        listener.kill()
        listener.wait()
    assert drive(make_host, lambda host: host.port_owner(port)) is None


# --- follow, facts ---------------------------------------------------------------


def test_follow_yields_existing_then_appended_bytes(make_host: HostFactory, tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    log_path.write_bytes(b"0123456789")

    async def body(host: Host) -> bytes:
        received = b""
        stream = host.follow(str(log_path), offset=4)
        async with asyncio.timeout(20):  # a hang guard, not a speed assertion
            async for chunk in stream:
                received += chunk
                if received == b"456789":
                    with log_path.open("ab") as handle:
                        handle.write(b"more\n")
                if received.endswith(b"more\n"):
                    break
        await stream.aclose()  # type: ignore[attr-defined]
        return received

    assert drive(make_host, body) == b"456789more\n"


def test_facts_describe_this_machine(make_host: HostFactory) -> None:
    facts = drive(make_host, lambda host: host.facts())
    assert facts.home == os.path.expanduser("~")
    assert facts.python_version and facts.python_version.count(".") == 2
    assert facts.disk_free_bytes is not None and facts.disk_free_bytes > 0
    assert facts.hostname == os.uname().nodename
    assert drive(make_host, lambda host: host.home()) == os.path.expanduser("~")


def test_facts_read_gpus_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: a stand-in nvidia-smi prints what the real one prints for this query."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'test "$1" = --query-gpu=index,name,memory.total,memory.free || exit 9\n'
        "printf '0, NVIDIA H200, 143771, 140000\\n1, NVIDIA H200, 143771, 512\\n'\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    facts = asyncio.run(LocalHost().facts())
    assert [(g.index, g.name, g.memory_total_mib, g.memory_free_mib) for g in facts.gpus] == [
        (0, "NVIDIA H200", 143771, 140000),
        (1, "NVIDIA H200", 143771, 512),
    ]


def test_spawn_refuses_relative_paths(make_host: HostFactory, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="log_path must be an absolute path"):
        drive(
            make_host,
            lambda host: host.spawn_detached(
                ["true"],
                env={},
                cwd=str(tmp_path),
                log_path="server.log",
                pid_path=str(tmp_path / "pid"),
                exit_path=str(tmp_path / "exit"),
            ),
        )
