"""One recovery policy (`launch/recovery.py`) behind every caller that restarts an engine.

The same death, an engine out of memory while serving whose error names only CUDA's
`cudaErrorMemoryAllocation`, takes the job's healer and `fleet-repair` to the same next start:
the engine's bound for it, `--max-running-requests` halved. A fleet job's restarts are kept in
job.json, so a job resumed counts them as a single server's are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.fleet.repair import FleetRepair, Repair
from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.dispatch.watchdog import RequestWatchdog
from specpilot.job import heal
from specpilot.job.record import JobRecord
from tests.fleet.conftest import FleetFactory, make_fleet, smg, smg_path  # noqa: F401  (fixtures used here)
from tests.job.conftest import JobFactory

#: the bound the engine's rule gives for this death, from `--max-running-requests 48`
BOUND = {"what": "the engine ran out of memory while serving", "flag": "--max-running-requests",
         "before": 48, "after": 24}  # fmt: skip
ARGS = ["--max-running-requests", "48"]
DEATH_S = 30.0


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_state(run_home: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_home.parent / "state" / "runs" / name / "state.json").read_text())
    return data


def _through_the_healer(
    job_factory: JobFactory, run_home: Path, tmp_path: Path
) -> tuple[dict[str, Any], list[str]]:
    """A job whose server dies once mid-job: its healer's restart and the restarted argv."""
    job = job_factory(
        scenario="sglang_serving_alloc_oom",
        rows=20,
        standin={"die_after_answers": 4, "die_once_file": str(tmp_path / "died")},
        args=ARGS,
    )
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    [restart] = json.loads((job.parent / "out" / "job.json").read_text())["restarts"]
    return restart, run_state(run_home, "jobsrv")["argv"]


def _through_fleet_repair(
    fleet_factory: FleetFactory, run_home: Path, tmp_path: Path
) -> tuple[dict[str, Any], list[str]]:
    """A fleet's one member dies at its first answer; `fleet-repair` restarts it."""
    standin = {"answers": "echo", "die_after_answers": 1, "die_once_file": str(tmp_path / "died")}
    path = fleet_factory(
        ["local"], name="rcv", scenario="sglang_serving_alloc_oom", standin=standin, args=ARGS
    )
    try:
        assert run("up", str(path)).exit_code == 0
        endpoint = run_state(run_home, "rcv-0")["endpoint"]
        body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(
            f"{endpoint}/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        with contextlib.suppress(OSError):  # it may die before its answer is out
            urllib.request.urlopen(request, timeout=10).close()
        deadline = time.monotonic() + DEATH_S
        while json.loads(run("status", "rcv", "--json").stdout)["members"][0]["serving"]:
            assert time.monotonic() < deadline, "the member did not die"
        repaired = run("fleet-repair", "rcv", "--backoff-s", "0", "--json")
        assert repaired.exit_code == 0, repaired.output
        [member] = json.loads(repaired.stdout)["members"]
        assert member["action"] == "restarted", member
        return member, run_state(run_home, "rcv-0")["argv"]
    finally:
        run("down", "rcv")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("caller", ["job healer", "fleet-repair"])
def test_a_serving_oom_named_cuda_error_memory_allocation_is_bounded_by_every_caller(
    caller: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if caller == "fleet-repair":
        request.getfixturevalue("smg")  # the cached router, found before the run home is set
    run_home: Path = request.getfixturevalue("run_home")
    if caller == "job healer":
        restart, argv = _through_the_healer(request.getfixturevalue("make_job"), run_home, tmp_path)
    else:
        restart, argv = _through_fleet_repair(request.getfixturevalue("make_fleet"), run_home, tmp_path)
    assert restart["cause"] == "oom"
    assert restart["bound"] == BOUND
    assert restart["restarts"] == 1
    # the live process was proven to run with the bound, and only with it
    assert argv.count("--max-running-requests") == 1
    assert argv[argv.index("--max-running-requests") + 1] == "24"


def test_a_resumed_fleet_job_keeps_its_restart_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet healer records each member restart in job.json; the next run of the job reads
    the count back instead of starting from none."""
    passes: list[dict[str, int]] = []
    restarted = Repair("jfl-0", "http://127.0.0.1:1", "restarted", restarts=1)

    async def one_pass(fleet: object, *, restarts: Any, **_: object) -> FleetRepair:
        made = getattr(restarts, "made", restarts)
        passes.append(dict(made))
        made[restarted.name] = restarted.restarts
        return FleetRepair([], [restarted])

    class NoStalls:
        def __init__(self, fleet: object) -> None: ...

        async def look(self, bound_s: float | None) -> list[object]:
            return []

    monkeypatch.setattr("specpilot.fleet.repair.load_recorded_fleet", lambda name: None)
    monkeypatch.setattr("specpilot.fleet.repair.repair_fleet", one_pass)
    monkeypatch.setattr("specpilot.job.member_stalls.MemberStalls", NoStalls)
    monkeypatch.setattr(heal, "FLEET_PASS_S", 0.0)
    dispatcher = cast(Dispatcher, SimpleNamespace(watchdog=RequestWatchdog(1.0, {})))  # no stall bound

    async def job(record: JobRecord) -> dict[str, int]:
        """The job's generate stage, for one pass of the healer: the counts that pass began with."""
        passes.clear()
        async with heal.fleet_healer("jfl", record, 3, lambda line: None)(dispatcher):
            while not passes:
                await asyncio.sleep(0)
        return passes[0]

    path = tmp_path / "job.json"
    assert asyncio.run(job(JobRecord(path, {}))) == {}
    resumed = JobRecord(path, json.loads(path.read_text()))
    assert asyncio.run(job(resumed)) == {"jfl-0": 1}
