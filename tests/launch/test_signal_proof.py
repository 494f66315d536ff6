"""No command signals a process it cannot prove is the run's, and read-only commands signal
nothing. Real processes throughout: each decoy is a live process group that must survive.

A decoy group here is one whose leader has exited (and been reaped) while a member lives
on, so its group number names only that member: what a run recorded by an older release
(no start time) looks like once its engine is gone, and what a group number taken over by
another session looks like."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.launch.ops import clear_leftovers, run_status
from specpilot.launch.state import RunState, read_state, write_state
from specpilot.launch.stop import RUN_TOKEN_VAR
from specpilot.spec import HostSection
from tests.fixtures.engines import wait_exec

#: random per test run: two runs of these tests at once must not see each other's processes
TOKEN = secrets.token_hex(16)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


@pytest.fixture
def spawned() -> Iterator[list[int]]:
    """Pids to SIGKILL after the test, whatever it did."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def orphaned_group(tmp_path: Path, spawned: list[int], script: str, env: dict[str, str] | None = None) -> int:
    """Run `script` (sh) as the leader of a new session and group; it starts its members and
    writes their pids to files before it exits. Returns the group number (the leader's pid),
    once the leader is reaped: the files are then complete (no sleeps)."""
    leader = subprocess.Popen(
        ["sh", "-c", script], start_new_session=True, cwd=tmp_path, env={**os.environ, **(env or {})}
    )
    assert leader.wait(timeout=30) == 0
    for name in ("member", "escaped"):
        if (tmp_path / name).exists():
            spawned.append(int((tmp_path / name).read_text()))
            wait_exec(spawned[-1])  # `$!` is known before the child's exec is done
    if (tmp_path / "escaped").exists():
        in_own_session(spawned[-1])
    return leader.pid


def in_own_session(pid: int) -> None:
    """`$!` of `setsid sleep &` is known before that child has called setsid(): wait until it
    has (up to 10 s, a guard), or the test would see it still in the group it leaves."""
    deadline = time.monotonic() + 10
    while os.getsid(pid) != pid and time.monotonic() < deadline:
        time.sleep(0.005)
    assert os.getsid(pid) == pid


MEMBER = "sleep 120 & echo $! > member.tmp && mv member.tmp member"
ESCAPED = "setsid sleep 120 & echo $! > escaped.tmp && mv escaped.tmp escaped"


def record(run_home: Path, name: str, pid: int, *, ticks: int | None, token: str | None = None) -> None:
    """A ready run as `up` records it (by an older release when `ticks` and `token` are None)."""
    run_dir = run_home / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "engine.log").write_text("The server is fired up and ready to roll!\n")
    write_state(
        RunState(
            name=name,
            host=HostSection(target="local"),
            remote_dir=str(run_dir),
            log_path=str(run_dir / "engine.log"),
            exit_path=str(run_dir / "exit"),
            pid=pid,
            pgid=pid,
            start_ticks=ticks,
            run_token=token,
            argv=("python3", "-m", "sglang.launch_server", "--port", "9"),
            endpoint="http://127.0.0.1:9",
            served_model_name=None,
            engine="sglang",
            engine_version="0.5.10",
            phase="ready",
            cause="ready",
            started_at_s=time.time() - 60,
        )
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_an_old_record_without_a_start_time_is_reported_not_acted_on(
    home: Path, tmp_path: Path, spawned: list[int]
) -> None:
    group = orphaned_group(tmp_path, spawned, MEMBER)
    [member] = spawned
    record(home, "old", group, ticks=None)
    status = asyncio.run(run_status("old"))
    assert (status.alive, status.leftovers, status.leftovers_unproven) == (False, (), (member,))
    assert alive(member)
    shown = run("status", "old").output
    assert f"pid {member} of process group {group} cannot be proven the run's" in shown
    down = run("down", "old", "--json")
    assert down.exit_code == 1
    said = json.loads(down.stdout)
    assert (said["stopped"], said["signalled"], said["unproven"]) == ("unproven", [], [member])
    assert read_state("old").phase == "ready"  # nothing stopped: the record stays as it was
    assert "not signalled (not provably the run's): pid" in run("down", "old").output
    assert asyncio.run(clear_leftovers("old")) is not None  # `up` reusing the name
    assert alive(member) and os.getpgid(member) == group


def test_a_group_number_taken_over_by_another_session_is_left_alone(
    home: Path, tmp_path: Path, spawned: list[int]
) -> None:
    """The run's engine is gone and its group number now names another session's group,
    whose members all started after the run: by start time alone they pass for the run's."""
    group = orphaned_group(tmp_path, spawned, MEMBER)
    [member] = spawned
    record(home, "taken", group, ticks=start_ticks(member) - 100, token=TOKEN)
    status = run("status", "taken", "--json")
    assert json.loads(status.stdout)["leftovers_unproven"] == [member]
    down = json.loads(run("down", "taken", "--json", "--timeout-s", "1").output)
    assert (down["stopped"], down["signalled"]) == ("unproven", [])
    left = asyncio.run(clear_leftovers("taken"))
    assert left is not None and (left.signalled, left.unproven) == ((), (member,))
    assert alive(member)


@pytest.mark.parametrize("which", ["group-1", "own-group"])
def test_group_one_and_the_caller_s_own_group_are_never_signalled(
    home: Path, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pgid = 1 if which == "group-1" else os.getpgrp()
    # the group's leader may have exited (a shell that ran pytest and went on): the record then
    # names a start time no process has, and the group must still never be signalled
    leader_alive = Path(f"/proc/{pgid}/stat").exists()
    record(home, "forged", pgid, ticks=start_ticks(pgid) if leader_alive else 1, token=TOKEN)
    status = asyncio.run(run_status("forged"))
    assert status.leftovers == ()
    down = json.loads(run("down", "forged", "--json", "--timeout-s", "1").output)
    assert (down["stopped"], down["signalled"]) == ("unproven", [])


def test_the_run_s_token_proves_what_outlived_the_engine_even_out_of_its_group(
    home: Path, tmp_path: Path, spawned: list[int]
) -> None:
    """An engine's helper in its group and its `setsid` child both outlive it: the token in
    their environment is the proof; `status` names them, `down` ends them, and a process
    that started later in another session (no token) survives."""
    group = orphaned_group(tmp_path, spawned, f"{MEMBER}; {ESCAPED}", env={RUN_TOKEN_VAR: TOKEN})
    member, escaped = spawned
    assert os.getpgid(escaped) == escaped != group  # out of the group, its parent gone
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)
    spawned.append(bystander.pid)
    record(home, "tokened", group, ticks=start_ticks(member) - 1, token=TOKEN)
    status = json.loads(run("status", "tokened", "--json").output)
    assert status["leftovers"] == sorted([member, escaped]) and status["leftovers_unproven"] == []
    assert alive(member) and alive(escaped)
    down = run("down", "tokened", "--json", "--timeout-s", "5")
    assert down.exit_code == 0
    said = json.loads(down.stdout)
    assert (said["stopped"], said["signalled"]) == ("terminated", sorted([member, escaped]))
    assert wait_gone(member) and wait_gone(escaped)
    assert bystander.poll() is None
    bystander.kill()
    bystander.wait()


def test_a_live_engine_s_group_and_its_setsid_child_are_stopped(
    home: Path, tmp_path: Path, spawned: list[int]
) -> None:
    """With the engine's pid still the engine (same start time), its group is the run's,
    and a child that left it is found by parent pid."""
    ready = tmp_path / "escaped"
    engine = subprocess.Popen(
        ["sh", "-c", f"{ESCAPED}; exec sleep 120"],
        start_new_session=True,
        cwd=tmp_path,
        env={**os.environ, RUN_TOKEN_VAR: TOKEN},
    )
    spawned.append(engine.pid)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    escaped = int(ready.read_text())
    spawned.append(escaped)
    in_own_session(escaped)
    record(home, "live", engine.pid, ticks=start_ticks(engine.pid), token=TOKEN)
    said = json.loads(run("down", "live", "--json", "--timeout-s", "5").output)
    assert (said["stopped"], said["signalled"]) == ("terminated", sorted([engine.pid, escaped]))
    assert engine.wait(timeout=10) == -signal.SIGTERM and wait_gone(escaped)


def test_a_start_interrupted_before_its_pid_came_back_is_stopped_by_its_token(
    home: Path, spawned: list[int]
) -> None:
    """`up` records the token before the spawn (pid 0): what the spawn started is still found."""
    engine = subprocess.Popen(
        ["sleep", "120"], start_new_session=True, env={**os.environ, RUN_TOKEN_VAR: TOKEN}
    )
    spawned.append(engine.pid)
    wait_exec(engine.pid)  # its token is in /proc/PID/environ only once the exec is done
    record(home, "midspawn", 0, ticks=None, token=TOKEN)
    assert asyncio.run(run_status("midspawn")).leftovers == (engine.pid,)
    down = run("down", "midspawn", "--json", "--timeout-s", "5")
    assert down.exit_code == 0
    assert json.loads(down.stdout)["signalled"] == [engine.pid]
    assert engine.wait(timeout=10) == -signal.SIGTERM
    again = run("down", "midspawn", "--json")
    assert (again.exit_code, json.loads(again.stdout)["stopped"]) == (0, "not_running")


def test_with_the_engine_s_pid_recycled_only_the_token_holders_are_stopped(
    home: Path, spawned: list[int]
) -> None:
    """The engine died and the kernel gave its pid to another process, which now leads a
    group of that number; the engine's setsid child lives on with the run's token."""
    recycled = subprocess.Popen(["sleep", "120"], start_new_session=True)
    child = subprocess.Popen(
        ["sleep", "120"], start_new_session=True, env={**os.environ, RUN_TOKEN_VAR: TOKEN}
    )
    spawned += [recycled.pid, child.pid]
    wait_exec(recycled.pid)
    wait_exec(child.pid)
    record(home, "recycled", recycled.pid, ticks=start_ticks(recycled.pid) - 1, token=TOKEN)
    status = asyncio.run(run_status("recycled"))
    assert status.pid_reused and (status.leftovers, status.leftovers_unproven) == ((child.pid,), ())
    down = json.loads(run("down", "recycled", "--json", "--timeout-s", "5").output)
    assert (down["stopped"], down["signalled"]) == ("terminated", [child.pid])
    assert child.wait(timeout=10) == -signal.SIGTERM and recycled.poll() is None
    assert json.loads(run("down", "recycled", "--json").output)["stopped"] == "stale"


def test_read_only_commands_never_run_a_stop(
    home: Path, tmp_path: Path, spawned: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even with the run's own leftovers there to end (proven by its token), `status`,
    `logs` and `runs` only look: the stop script runs in its read-only mode or not at all."""
    import specpilot.launch.stop as stop

    group = orphaned_group(tmp_path, spawned, f"{MEMBER}; {ESCAPED}", env={RUN_TOKEN_VAR: TOKEN})
    record(home, "looked-at", group, ticks=start_ticks(spawned[0]) - 1, token=TOKEN)
    modes: list[str] = []
    real = stop._group_script

    async def spy(host: object, mode: str, *args: object, **kwargs: object) -> str:
        modes.append(mode)
        return await real(host, mode, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stop, "_group_script", spy)
    for command in (
        ["status", "looked-at"],
        ["status", "looked-at", "--json"],
        ["logs", "looked-at"],
        ["runs"],
    ):
        run(*command)
    assert modes and set(modes) == {"members"}
    assert all(alive(pid) for pid in spawned)


def test_a_caller_holding_the_token_is_never_signalled(home: Path, spawned: list[int]) -> None:
    """`down` run from inside the run's environment (a shell the engine's env was copied
    into) ends the run's processes, not itself or its shell."""
    holder = subprocess.Popen(
        ["sleep", "120"], start_new_session=True, env={**os.environ, RUN_TOKEN_VAR: TOKEN}
    )
    spawned.append(holder.pid)
    wait_exec(holder.pid)
    record(home, "inside", 0, ticks=None, token=TOKEN)
    env = {**os.environ, RUN_TOKEN_VAR: TOKEN, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    down = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m specpilot down inside --json --timeout-s 5; echo shell-lived'],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert down.returncode == 0 and down.stdout.endswith("shell-lived\n"), down.stderr
    said = json.loads(down.stdout.removesuffix("shell-lived\n"))
    assert (said["stopped"], said["signalled"]) == ("terminated", [holder.pid])
    assert holder.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.skipif(os.getuid() != 0, reason="starting another user's process needs root")
def test_another_user_s_process_is_never_the_run_s(home: Path, spawned: list[int]) -> None:
    """Even a record naming another user's live process by pid and start time (root could
    signal it) proves nothing: the run's processes are the caller's user's."""
    nobody = subprocess.Popen(["sleep", "120"], start_new_session=True, user=65534, group=65534)
    spawned.append(nobody.pid)
    record(home, "theirs", nobody.pid, ticks=start_ticks(nobody.pid), token=TOKEN)
    down = json.loads(run("down", "theirs", "--json", "--timeout-s", "1").output)
    assert (down["stopped"], down["signalled"], down["unproven"]) == ("unproven", [], [nobody.pid])
    assert nobody.poll() is None


def test_a_token_holder_proves_its_group_members_whose_environment_was_rewritten(
    home: Path, tmp_path: Path, spawned: list[int]
) -> None:
    """vLLM's EngineCore rewrites its title (setproctitle), which erases its environment and
    the token with it: a token holder in the same group proves it the run's (no group number
    is reused while the group has a member); with no holder left it is only reported."""
    erase = f"env -u {RUN_TOKEN_VAR} sleep 120 & echo $! > erased.tmp && mv erased.tmp erased"
    group = orphaned_group(tmp_path, spawned, f"{MEMBER}; {erase}", env={RUN_TOKEN_VAR: TOKEN})
    [holder] = spawned
    erased = int((tmp_path / "erased").read_text())
    spawned.append(erased)
    record(home, "rewritten", group, ticks=start_ticks(holder) - 1, token=TOKEN)
    assert asyncio.run(run_status("rewritten")).leftovers == tuple(sorted([holder, erased]))
    os.kill(holder, signal.SIGKILL)
    assert wait_gone(holder)
    status = asyncio.run(run_status("rewritten"))
    assert (status.leftovers, status.leftovers_unproven) == ((), (erased,))
    down = json.loads(run("down", "rewritten", "--json", "--timeout-s", "1").output)
    assert (down["stopped"], down["unproven"]) == ("unproven", [erased])
    assert alive(erased)


def test_down_ends_a_group_proven_by_one_token_holder(home: Path, tmp_path: Path, spawned: list[int]) -> None:
    erase = f"env -u {RUN_TOKEN_VAR} sleep 120 & echo $! > erased.tmp && mv erased.tmp erased"
    group = orphaned_group(tmp_path, spawned, f"{MEMBER}; {erase}", env={RUN_TOKEN_VAR: TOKEN})
    [holder] = spawned
    erased = int((tmp_path / "erased").read_text())
    spawned.append(erased)
    record(home, "proven-group", group, ticks=start_ticks(holder) - 1, token=TOKEN)
    down = json.loads(run("down", "proven-group", "--json", "--timeout-s", "5").output)
    assert (down["stopped"], down["signalled"]) == ("terminated", sorted([holder, erased]))
    assert wait_gone(holder) and wait_gone(erased)
