"""The run state file: a typed record that keeps the keys every release wrote, loads the
files older releases left behind, and names the file, the key and the fix when damaged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.launch.runs import list_runs
from specpilot.launch.state import CrashRecord, RunState, read_state, state_path, write_state
from specpilot.spec import HostSection
from tests.launch.helpers import ready_state

#: a state file as the first release wrote it for a ready run (supervisor.py at its first
#: commit): no exit_path, start_ticks, ready_log_bytes, exit_status, crash or stopped_at yet
FIRST_RELEASE_READY = {
    "name": "old-ready",
    "target": "ssh://gpu@10.0.0.9:2222",
    "host_options": {
        "identity_file": "~/.ssh/gpu",
        "known_hosts": None,
        "ssh_config": None,
        "accept_new_host_key": True,
    },
    "remote_dir": "/home/gpu/.specpilot/runs/old-ready",
    "log_path": "/home/gpu/.specpilot/runs/old-ready/engine.log",
    "pid": 51234,
    "pgid": 51234,
    "endpoint": "http://127.0.0.1:30000",
    "served_model_name": None,
    "engine": "sglang",
    "engine_version": "0.5.10",
    "argv": ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--api-key", "***"],
    "phase": "ready",
    "cause": "ready",
    "started_at": 1764400000.25,
    "allocations": {"kv_cache_gib": 60.48, "max_total_num_tokens": 812000},
}

#: a run that crashed after ready, as the release before the typed record wrote it
#: (supervisor.py, then serving.record_crash; `crash` is Crash.to_json())
CRASHED_AFTER_READY = {
    **FIRST_RELEASE_READY,
    "name": "old-crash",
    "target": "local",
    "host_options": {
        "identity_file": None,
        "known_hosts": None,
        "ssh_config": None,
        "accept_new_host_key": False,
    },
    "exit_path": "/home/u/.specpilot/runs/old-crash/exit",
    "start_ticks": 123456789,
    "exit_status": None,
    "ready_log_bytes": 18211,
    "phase": "failed",
    "cause": "crash",
    "crash": {
        "cause": "crash",
        "signature": "engine_dead",
        "line": "Worker proc VllmWorker-3 died unexpectedly",
        "exit_status": None,
    },
    "failed_at": 1764400100.5,
}


def _write_raw(name: str, text: str) -> Path:
    path = state_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_state_round_trips_through_json_and_the_file(run_home: Path) -> None:
    state = ready_state(
        "round",
        host=HostSection(
            target="ssh://u@h:22", identity_file="/k", known_hosts="/kh", accept_new_host_key=True
        ),
        exit_status=-9,
    ).crashed(CrashRecord("crash", "engine_dead", "Worker proc died", -9), at_s=1_780_000_100.0)
    assert RunState.from_json(state.to_json()) == state
    write_state(state)
    assert read_state("round") == state
    # the keys on disk are the ones every release wrote: `started_at`, not `started_at_s`
    on_disk = json.loads(state_path("round").read_text())
    assert on_disk["started_at"] == 1_780_000_000.0 and on_disk["failed_at"] == 1_780_000_100.0
    assert on_disk["target"] == "ssh://u@h:22"
    assert on_disk["host_options"] == {
        "identity_file": "/k",
        "known_hosts": "/kh",
        "ssh_config": None,
        "accept_new_host_key": True,
    }
    assert on_disk["crash"]["line"] == "Worker proc died"
    assert set(on_disk) >= set(FIRST_RELEASE_READY) | set(CRASHED_AFTER_READY)


def test_updates_change_only_what_they_say() -> None:
    state = ready_state("upd")
    stopped = state.stopped("stop_failed", at_s=5.0)
    assert (stopped.phase, stopped.stopped_at_s, stopped.cause, stopped.pid) == (
        "stop_failed",
        5.0,
        "ready",
        4321,
    )
    assert stopped.to_json()["stopped_at"] == 5.0  # the key `down` always wrote
    ended = state.ended("failed", "oom", allocations={"weights_gib": 15.2}, exit_status=1)
    assert (ended.phase, ended.cause, ended.allocations, ended.exit_status) == (
        "failed",
        "oom",
        {"weights_gib": 15.2},
        1,
    )
    assert ended.ready_log_bytes is None  # serving never began


@pytest.mark.parametrize(
    "shape", [FIRST_RELEASE_READY, CRASHED_AFTER_READY], ids=["first-release", "crashed"]
)
def test_state_files_of_earlier_releases_load(run_home: Path, shape: dict[str, Any]) -> None:
    _write_raw(str(shape["name"]), json.dumps(shape, indent=2, sort_keys=True))
    state = read_state(str(shape["name"]))
    assert (state.phase, state.pid, state.pgid, state.started_at_s) == (
        shape["phase"],
        shape["pid"],
        shape["pgid"],
        shape["started_at"],
    )
    assert state.host.target == shape["target"]
    assert state.argv[-1] == "***"
    if shape is FIRST_RELEASE_READY:
        assert state.host.identity_file == "~/.ssh/gpu" and state.host.accept_new_host_key
        # not recorded then: the identity falls back to the argv, serving is not watched
        assert (state.start_ticks, state.exit_path, state.ready_log_bytes, state.crash) == (
            None,
            None,
            None,
            None,
        )
        assert state.allocations == {"kv_cache_gib": 60.48, "max_total_num_tokens": 812000}
    else:
        assert state.crash == CrashRecord(
            "crash", "engine_dead", "Worker proc VllmWorker-3 died unexpectedly", None
        )
        assert (state.start_ticks, state.ready_log_bytes, state.failed_at_s) == (
            123456789,
            18211,
            1764400100.5,
        )
    # written back, it keeps every key it had and what it said
    write_state(state)
    again = json.loads(state_path(state.name).read_text())
    assert {key: again[key] for key in shape} == shape


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('{"name": "bad", "pha', "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        (
            json.dumps({k: v for k, v in FIRST_RELEASE_READY.items() if k != "log_path"}),
            "'log_path' is missing",
        ),
        (json.dumps({**FIRST_RELEASE_READY, "pid": "51234"}), "'pid' is '51234', not int"),
        (json.dumps({**FIRST_RELEASE_READY, "pid": True}), "'pid' is True, not int"),
        (json.dumps({**FIRST_RELEASE_READY, "argv": ["a", 1]}), "'argv' holds something other than strings"),
        (json.dumps({**FIRST_RELEASE_READY, "host_options": {"port": 22}}), "host_options.port"),
        (json.dumps({**CRASHED_AFTER_READY, "crash": {"line": "x"}}), "'crash.cause' is missing"),
    ],
    ids=[
        "cut-json",
        "a-list",
        "missing-key",
        "pid-text",
        "pid-bool",
        "argv-number",
        "unknown-option",
        "crash-cause",
    ],
)
def test_a_damaged_state_file_is_one_line_naming_file_key_and_fix(
    run_home: Path, text: str, names: str
) -> None:
    path = _write_raw("bad", text)
    with pytest.raises(UserError) as caught:
        read_state("bad")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"NAME: {path} is damaged: ")
    assert names in message
    assert f"delete {path.parent} if the run is gone" in message


def test_status_of_a_damaged_state_exits_2_with_that_line(run_home: Path) -> None:
    _write_raw("bad", json.dumps({**FIRST_RELEASE_READY, "started_at": "yesterday"}))
    result = CliRunner().invoke(cli, ["status", "bad"])
    assert result.exit_code == 2
    assert "'started_at' is 'yesterday', not int or float" in result.output
    assert "Traceback" not in result.output


def test_runs_lists_loadable_states_and_skips_damaged_ones(run_home: Path) -> None:
    write_state(ready_state("good", host=HostSection(target="ssh://gpu@10.0.0.9")))
    _write_raw("old-ready", json.dumps(FIRST_RELEASE_READY))
    _write_raw("bad", '{"name": "bad"}')
    assert sorted(run.name for run in list_runs()) == ["good", "old-ready"]
