"""`up` against scripted stand-ins on the local host: every failure classified, nothing left."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.errors import UserError
from specpilot.hosts.errors import HostConnectionLost
from specpilot.hosts.local import LocalHost
from specpilot.launch.ops import run_down, run_status, stream_log
from specpilot.launch.preflight import run_preflight
from specpilot.launch.state import read_state, state_path
from specpilot.launch.supervisor import UpOptions
from tests.fakeengines.scenarios import SCENARIOS
from tests.fixtures.memory_host import launch_host, playing
from tests.launch.conftest import FAKES, SpecFactory
from tests.launch.helpers import group_alive, up

FAILING = sorted(name for name, s in SCENARIOS.items() if s.expected_signature)


@pytest.mark.parametrize("name", FAILING)
def test_failure_is_classified_fast_with_the_whole_error_and_nothing_left(
    name: str, make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    scenario = SCENARIOS[name]
    # The engine (on a memory host) lingers after its fatal line: `up` must decide on that line
    # and stop the group, not wait for the engine to end on its own.
    host = launch_host(spawn_script=playing(scenario, ends=False))
    spec = make_spec(name, engine=scenario.engine)
    result = up(spec, host=host)
    assert result.phase == "failed"
    assert result.cause == scenario.expected_cause, result.error
    fatal_text = next(step.text for step in scenario.steps if step.fatal)
    assert result.error is not None and fatal_text.split("{")[0][:60] in result.error
    assert result.pid is not None and not group_alive(result.pid, host=host)
    assert host.processes[result.pid].signals  # stopped by `up`, not ended on its own
    assert read_state(spec.name).phase == "failed"


def test_ready_then_status_logs_down_from_the_state_file(
    make_spec: SpecFactory, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = launch_host(spawn_script=playing(SCENARIOS["sglang_ready"]))
    monkeypatch.setattr("specpilot.launch.ops.host_for", lambda state: host)  # status, logs, down
    spec = make_spec("sglang_ready")
    planned = run_preflight(resolve(spec)).plan
    assert planned is not None
    # the log prints 295950 KV tokens, 96 state slots, 48 requests and 50.66 GiB of weights
    plan = replace(planned, kv_tokens=295950, state_slots=80, max_running_requests=48, weights_gib=50.66)
    result = up(spec, plan=plan, host=host)
    assert (result.phase, result.cause) == ("ready", "ready"), result.error
    assert result.pid is not None
    try:
        assert result.allocations["kv_tokens"] == 295950
        warned = {d["key"]: d["warn"] for d in result.plan_diff}
        assert warned == {
            "kv_tokens": False,
            "state_slots": True,
            "max_running_requests": False,
            "weights_gib": False,
        }
        status = asyncio.run(run_status(spec.name))
        assert status.alive and status.serving and status.phase == "ready"
        assert any("ready to roll" in line for line in status.last_lines)
        state = read_state(spec.name)
        assert state.endpoint == f"http://127.0.0.1:{spec.server.port}"
        assert state.served_model_name == "fake-model"

        async def whole_log() -> bytes:
            return b"".join([chunk async for chunk in stream_log(spec.name, follow=False)])

        assert b"Load weight begin" in asyncio.run(whole_log())
    finally:
        stopped = asyncio.run(run_down(spec.name, timeout_s=10.0))
    assert stopped["stopped"] == "terminated"
    assert not group_alive(result.pid, host=host)
    after = asyncio.run(run_status(spec.name))
    assert (after.phase, after.alive) == ("stopped", False)


def test_hang_after_weight_load_names_the_last_phase(make_spec: SpecFactory, run_home: Path) -> None:
    host = launch_host(spawn_script=playing(SCENARIOS["sglang_hang_after_weights"]))
    spec = make_spec("sglang_hang_after_weights", hang_timeout_s=1.5)
    result = up(spec, host=host)
    assert result.cause == "hang"
    assert result.error is not None and "weights_loaded" in result.error
    assert result.pid is not None and not group_alive(result.pid, host=host)


def test_not_ready_in_time_is_a_timeout(make_spec: SpecFactory, run_home: Path) -> None:
    host = launch_host(spawn_script=playing(SCENARIOS["sglang_hang_after_weights"]))
    spec = make_spec("sglang_hang_after_weights", ready_timeout_s=1.0)
    result = up(spec, host=host)
    assert result.cause == "timeout"
    assert result.pid is not None and not group_alive(result.pid, host=host)


def test_launch_file_altered_after_shipping_is_caught_before_start(
    make_spec: SpecFactory, run_home: Path
) -> None:
    async def tamper(remote_dir: str) -> None:
        script = Path(remote_dir) / "launch.sh"
        script.write_text(script.read_text().replace("exec ", "exec env X=1 "))

    spec = make_spec("sglang_ready")
    result = up(spec, options=UpOptions(after_ship=tamper))
    assert result.cause == "mismatch"
    assert result.error is not None and "launch.sh" in result.error
    assert result.pid is None  # nothing was started


def test_wrapper_that_reexecs_with_other_flags_is_a_mismatch(make_spec: SpecFactory, run_home: Path) -> None:
    spec = make_spec("sglang_ready", command=["bash", str(FAKES / "rewrap.sh"), sys.executable])
    result = up(spec)
    assert result.cause == "mismatch"
    assert result.error is not None and "+--mem-fraction-static" in result.error
    assert result.pid is not None and not group_alive(result.pid)


def test_process_that_changes_its_environment_is_a_mismatch(make_spec: SpecFactory, run_home: Path) -> None:
    spec = make_spec(
        "sglang_ready",
        command=[sys.executable, str(FAKES / "reexec_env.py")],
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    )
    result = up(spec)
    assert result.cause == "mismatch"
    assert result.error is not None
    assert "- SGLANG_ENABLE_SPEC_V2=1" in result.error
    assert "+ SGLANG_ENABLE_SPEC_V2=0" in result.error


def test_port_already_held_is_refused_with_the_holder(make_spec: SpecFactory, run_home: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        spec = make_spec("sglang_ready", port=holder.getsockname()[1])
        result = up(spec)
    assert result.cause == "port_in_use"
    assert result.error is not None and f"pid {os.getpid()}" in result.error
    assert result.pid is None


@pytest.mark.parametrize(
    "secret",
    ["hf_abcdefghijklmnop123456", 'hf_with\ttab"and-quote'],
    ids=["plain", "needs a TOML escape"],
)
def test_secrets_reach_the_process_but_no_file_or_output(
    make_spec: SpecFactory, run_home: Path, secret: str
) -> None:
    spec = make_spec("sglang_ready", env={"HF_TOKEN": secret}, args=["--api-key", secret])
    result = up(spec)
    try:
        # ready means the live argv and env matched the plan: the engine got the real values
        assert result.phase == "ready", result.error
        state_text = state_path(spec.name).read_text()
        run_dir = Path(result.remote_dir or "")
        assert (run_dir / "env").read_text().count("HF_TOKEN=${HF_TOKEN}") == 1
        assert '--api-key "${SPECPILOT_ARG_API_KEY}"' in (run_dir / "launch.sh").read_text()
        for text in (
            state_text,
            json.dumps(result.to_json()),
            (run_dir / "spec.toml").read_text(),
            (run_dir / "env").read_text(),
            (run_dir / "manifest.json").read_text(),
            (run_dir / "launch.sh").read_text(),
        ):
            assert secret not in text and json.dumps(secret)[1:-1] not in text
    finally:
        asyncio.run(run_down(spec.name, timeout_s=10.0))


def test_losing_the_log_stream_fails_the_start_and_stops_the_engine(
    make_spec: SpecFactory, run_home: Path
) -> None:
    class LogStreamDrops(LocalHost):
        async def follow(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
            raise HostConnectionLost(f"follow {path}: connection lost (injected)")
            yield b""  # an async generator, as the real one

    spec = make_spec("sglang_hang_after_weights")
    with pytest.raises(HostConnectionLost):
        up(spec, host=LogStreamDrops())
    state = read_state(spec.name)
    assert state.phase == "failed"
    assert not group_alive(state.pid)


def test_down_stops_a_helper_that_left_the_group(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """A helper the engine started with setsid is in another process group; `down` once
    said the run stopped while it kept running."""
    pid_file = tmp_path / "escaped.pid"
    spec = make_spec("sglang_ready", standin={"setsid_child_file": str(pid_file)})
    result = up(spec)
    assert result.phase == "ready", result.error
    escaped = int(pid_file.read_text())
    assert os.getpgid(escaped) != result.pid  # it really left the group
    stopped = asyncio.run(run_down(spec.name, timeout_s=10.0))
    assert (stopped["phase"], stopped["stopped"]) == ("stopped", "terminated")
    stat = Path(f"/proc/{escaped}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("problem", ["missing", "not executable", "not on PATH"])
def test_an_engine_command_that_cannot_run_is_named_before_anything_starts(
    problem: str, make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """Once reported as `crash during 'starting'` after the process ended with 127."""
    program = tmp_path / "engine"
    if problem == "not executable":
        program.write_text("#!/bin/sh\n")
        program.chmod(0o644)
    command = ["no-such-engine-9f2"] if problem == "not on PATH" else [str(program)]
    spec = make_spec("sglang_ready", command=command)
    with pytest.raises(UserError) as raised:
        up(spec)
    line = str(raised.value)
    assert line.startswith(f"[engine] command: {command[0]!r} is ")
    assert ("is not executable" if problem == "not executable" else "is not found") in line
    assert not state_path(spec.name).exists()  # nothing was started or recorded


def test_group_alive_sees_a_live_group_and_not_a_gone_one() -> None:
    """The helper behind every "nothing left" assertion here can say yes (it once said no to all)."""
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert group_alive(process.pid)
    finally:
        process.kill()
        process.wait()
    assert not group_alive(process.pid)
