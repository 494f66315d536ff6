"""`bench` stops what it started, whatever ends it: a signal the moment a variant's engine
appears, a second signal during the stop, SIGHUP (the SSH session closed). Synchronised on
the files `up` writes (the variant's pid file), not on sleeps."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.conftest import ROOT, SpecFactory, specpilot, write_prompts
from tests.fixtures.engines import process_group_members

SLOW = {"step_s": 0.05, "accept": 1.0, "cap": 4}
#: the bench's own time budget (`--budget-s`): it ends itself by then
BUDGET_S = 120
#: how long `finish` waits past that budget for the stop (a loaded machine is slow)
STOP_GRACE_S = 60


def wait_for(home: Path, point: str, process: subprocess.Popen[str], within_s: float = 90.0) -> None:
    """Until the pid file of a run of `point` (at any running-request cap) appears."""
    deadline = time.monotonic() + within_s
    while not any((home / "runs").glob(f"{point}-at-*/pid")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no run of {point} recorded its pid"
        time.sleep(0.002)


def start_bench(spec: Path, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    prompts = write_prompts(tmp_path / "prompts.jsonl", 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "specpilot", "bench", str(spec), "--prompts", str(prompts),
            "--job", str(tmp_path / "job"), "--sample", "16", "--max-tokens", "400",
            "--variants", "plain,NEXTN:1", "--budget-s", str(BUDGET_S), "--warmup-s", "2", *extra]  # fmt: skip
    return subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def holding(token: str) -> list[int]:
    """Live processes whose environment holds the run token `token`."""
    marker = f"SPECPILOT_RUN_TOKEN={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                marker in (entry / "environ").read_bytes().split(b"\0")
                and " Z " not in (entry / "stat").read_text().rsplit(")", 1)[1][:3]
            ):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def left_running(home: Path) -> dict[str, list[int]]:
    """Every run this home recorded -> what of it is alive: its group (once its pid was
    recorded) and every process holding its token (an engine whose pid never was)."""
    found: dict[str, list[int]] = {}
    for state_file in (home / "runs").glob("*/state.json"):
        state = json.loads(state_file.read_text())
        group = process_group_members(state["pgid"]) if state["pgid"] > 1 else []
        point = re.sub(r"-at-\d+$", "", state["name"])  # the configuration, at whichever cap
        found[point] = sorted({*found.get(point, []), *group, *holding(state["run_token"])})
    return found


def finish(process: subprocess.Popen[str]) -> str:
    """The bench's output once it ended; one that does not end within its budget (and the
    grace for its stop) is killed, and so is every process its runs left (the test fails;
    nothing may outlive it). A fixed 90 s, under the 120 s budget, failed a bench that ran
    within its budget on a loaded machine (parallel workers)."""
    try:
        out, err = process.communicate(timeout=BUDGET_S + STOP_GRACE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
            for pids in left_running(Path(os.environ["SPECPILOT_HOME"])).values():
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
    return out + err


@pytest.mark.parametrize(
    "signals",
    [
        [signal.SIGINT],
        [signal.SIGTERM],
        [signal.SIGHUP],
        [signal.SIGTERM, signal.SIGTERM],
        [signal.SIGINT, signal.SIGTERM],
    ],
    ids=["int", "term", "hup", "term-term", "int-term"],
)
def test_a_signal_as_a_variant_s_engine_appears_stops_the_bench_and_the_engine(
    signals: list[signal.Signals], bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    spec = bench_spec({"0": SLOW, "1": SLOW})
    process = start_bench(spec, tmp_path)
    home = Path(os.environ["SPECPILOT_HOME"])
    wait_for(home, "qb-bench-plain", process)
    for sig in signals:
        process.send_signal(sig)
        time.sleep(0.05)  # the second signal lands while the first one's stop runs
    said = finish(process)
    assert process.returncode == 130, said
    assert "every server this bench started is stopped" in said
    assert left_running(home) == {"qb-bench-plain": []}, said


def test_a_variant_that_dies_mid_measure_leaves_nothing_running(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    """Its engine exits mid-sample and its child in a session of its own outlives it: the
    run's token finds the child, and the bench goes on to the next variant (which alone is
    measured: nothing compared, so no winner, exit 1)."""
    child_file = tmp_path / "child.pid"
    dying = {**SLOW, "die_at_request": 12, "setsid_child": str(child_file)}
    spec = bench_spec({"0": dying, "1": {"step_s": 0.01, "accept": 1.0, "cap": 8}})
    process = start_bench(spec, tmp_path)
    said = finish(process)
    child = int(child_file.read_text())
    assert process.returncode == 1 and "no winner: " in said, said
    assert not Path(f"/proc/{child}").exists() or " Z " in Path(f"/proc/{child}/stat").read_text(), said
    assert left_running(Path(os.environ["SPECPILOT_HOME"])) == {"qb-bench-plain": [], "qb-bench-nextn-1": []}


def test_two_benches_of_one_spec_or_one_port_cannot_run_at_once(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    spec = bench_spec({"0": SLOW, "1": SLOW})
    same_port = tmp_path / "other.toml"
    same_port.write_text(spec.read_text().replace('name = "qb"', 'name = "qc"'))
    first = start_bench(spec, tmp_path)
    home = Path(os.environ["SPECPILOT_HOME"])
    try:
        wait_for(home, "qb-bench-plain", first)
        for other, busy in (
            (spec, "another bench of spec 'qb' is running"),
            (same_port, "another bench uses port"),
        ):
            second = specpilot(
                "bench", other, "--prompts", tmp_path / "prompts.jsonl", "--job", tmp_path / "job2"
            )
            assert second.code == 2 and busy in second.stderr, second.output
        first.send_signal(signal.SIGINT)
    finally:
        said = finish(first)
    assert first.returncode == 130, said
    assert left_running(home) == {"qb-bench-plain": []}  # the refused ones started nothing


def test_an_unwritable_write_target_is_refused_before_anything_starts(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    spec = bench_spec({"0": SLOW})
    prompts = write_prompts(tmp_path / "prompts.jsonl", 40)
    target = tmp_path / "no-such-folder" / "best.toml"
    ran = specpilot("bench", spec, "--prompts", prompts, "--job", tmp_path / "job", "--write", target)
    assert ran.code == 2, ran.output
    assert ran.stderr.startswith(f"error: --write: cannot write {target}: No such file or directory"), (
        ran.stderr
    )
    assert not (Path(os.environ["SPECPILOT_HOME"]) / "runs").exists()  # nothing was started
    assert not target.parent.exists()


#: the bench command, sending signal argv[1] to itself from inside the 3rd request's task of a
#: sample (the loop mid-step)
SIGNALLED_IN_A_REQUEST = """
import os, sys
signum = int(sys.argv.pop(1))
from specpilot.bench.client import StreamingChatClient
complete, sent = StreamingChatClient.complete, []
async def signalled(self, *args, **kwargs):
    sent.append(1)
    if len(sent) == 3:
        os.kill(os.getpid(), signum)
    return await complete(self, *args, **kwargs)
StreamingChatClient.complete = signalled
from specpilot.cli import cli
cli(sys.argv[1:])
"""


@pytest.mark.parametrize(
    "signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT], ids=["SIGHUP", "SIGTERM", "SIGINT"]
)
def test_a_signal_mid_request_ends_the_bench_with_nothing_printed_after(
    signum: int, bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    """The bench's job cancels its requests and the bench stops its server at once. Before,
    SIGHUP raised KeyboardInterrupt in the request's task, which kept it unretrieved (a
    traceback after the bench's last line)."""
    spec = bench_spec({"0": SLOW, "1": SLOW})
    prompts = write_prompts(tmp_path / "prompts.jsonl", 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-c", SIGNALLED_IN_A_REQUEST, str(signum), "bench", str(spec),
            "--prompts", str(prompts), "--job", str(tmp_path / "job"), "--sample", "16",
            "--max-tokens", "400", "--variants", "plain,NEXTN:1", "--budget-s", str(BUDGET_S), "--warmup-s", "2"]  # fmt: skip
    ended = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=BUDGET_S + STOP_GRACE_S)
    said = ended.stderr
    assert ended.returncode == 130, said
    assert [w for w in ("Traceback", "never retrieved", "never awaited") if w in said] == [], said
    assert said.rstrip().endswith("interrupted: every server this bench started is stopped"), said
    assert left_running(Path(os.environ["SPECPILOT_HOME"])) == {"qb-bench-plain": []}, said


def test_a_signal_under_json_is_one_json_object(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    """`bench --json` ended by a signal: stdout held nothing (the stop was said on stderr only)."""
    spec = bench_spec({"0": SLOW, "1": SLOW})
    prompts = write_prompts(tmp_path / "prompts.jsonl", 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-c", SIGNALLED_IN_A_REQUEST, str(int(signal.SIGTERM)), "bench", str(spec),
            "--prompts", str(prompts), "--job", str(tmp_path / "job"), "--sample", "16",
            "--max-tokens", "400", "--variants", "plain,NEXTN:1", "--budget-s", str(BUDGET_S), "--warmup-s", "2",
            "--json"]  # fmt: skip
    ended = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=BUDGET_S + STOP_GRACE_S)
    assert ended.returncode == 130, ended.stderr
    shown = json.loads(ended.stdout)
    assert set(shown) == {"error", "fix", "exit"} and shown["exit"] == 130, shown
    assert shown["error"] == "interrupted: every server this bench started is stopped", shown
    assert "same command" in shown["fix"], shown
