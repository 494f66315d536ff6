"""`specpilot job` end to end on stand-in SGLang engines (the same verified start as `up`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.fakeengines.standin import CONFIG_ENV, config_env
from tests.job.conftest import JobFactory, output_ids
from tests.launch.conftest import FAKES, free_port


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def record(job: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((job.parent / "out" / "job.json").read_text())
    return data


def run_state(run_home: Path, name: str = "jobsrv") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_home.parent / "state" / "runs" / name / "state.json").read_text())
    return data


def test_one_command_runs_every_stage_then_stops_its_server(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(job={"export": ["specforge", "parquet"]})
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    data = record(job)
    assert {s: data["stages"][s]["status"] for s in data["stages"]} == {
        "check": "done", "plan": "done", "bench": "skipped", "up": "done",
        "generate": "done", "export": "done", "down": "done",
    }  # fmt: skip
    assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(20))
    assert data["stages"]["up"]["evidence"]["argv_verified"]
    assert set(data["stages"]["export"]["evidence"]["formats"]) == {"specforge", "parquet"}
    assert (job.parent / "out" / "specforge.jsonl").exists()
    assert run_state(run_home)["phase"] == "stopped"
    assert "GPU-hours used, per stage" in result.output and "generate" in result.output


def test_the_same_command_again_redoes_nothing(make_job: JobFactory, run_home: Path) -> None:
    job = make_job()
    assert run("job", str(job)).exit_code == 0
    before = record(job)
    again = run("job", str(job), "--json")
    assert again.exit_code == 0, again.output
    after = record(job)
    assert all(
        after["stages"][s]["attempts"] == before["stages"][s]["attempts"] for s in ("check", "up", "generate")
    )
    assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(20))


def test_an_engine_that_dies_mid_job_is_restarted_and_no_row_is_lost(
    make_job: JobFactory, run_home: Path
) -> None:
    once = run_home.parent / "died-once"
    job = make_job(rows=40, standin={"die_after_answers": 8, "die_once_file": str(once)})
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    assert once.exists()  # it did die
    ids = output_ids(job.parent / "out")
    assert sorted(ids) == sorted(f"q{i}" for i in range(40))  # every row exactly once
    restarts = record(job)["restarts"]
    assert [(r["cause"], r["outcome"], r["bound"]) for r in restarts] == [("crash", "ready", None)]
    assert "restart 1 of 3" in result.output
    # the time from its death to ready again is GPU-hours wasted
    assert restarts[0]["down_s"] > 0 and record(job)["gpu_hours_wasted"]["parts"]["restarts"] > 0


def test_a_serving_oom_of_copy_on_write_restarts_with_prefill_max_requests(
    make_job: JobFactory, run_home: Path
) -> None:
    """The H200 job's death: radix-cache hits' SSM states copied on write ran out of memory.
    The stand-in dies so until it runs with --prefill-max-requests."""
    job = make_job(
        scenario="sglang_serving_cow_oom",
        rows=30,
        standin={"die_after_answers": 5, "die_unless_flag": "--prefill-max-requests"},
        args=["--max-running-requests", "48"],
    )
    result = run("job", str(job), "--keep-servers")
    try:
        assert result.exit_code == 0, result.output
        assert sorted(output_ids(job.parent / "out")) == sorted(f"q{i}" for i in range(30))
        data = record(job)
        assert len(data.get("restarts", [])) == 1, result.output
        [restart] = data["restarts"]
        assert restart["cause"] == "oom"
        assert restart["bound"] == {
            "what": "the radix cache's copy-on-write of SSM states ran out of memory",
            "flag": "--prefill-max-requests", "before": None, "after": 24,
        }  # fmt: skip
        assert data["server_args"][-2:] == ["--prefill-max-requests", "24"]
        argv = run_state(run_home)["argv"]
        assert "--prefill-max-requests" in argv  # the live process was proven to run with it
        assert "restarting with --prefill-max-requests 24 (was unset)" in result.output
    finally:
        run("down", "jobsrv")


def test_past_max_restarts_the_job_stops_and_says_so(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(rows=30, standin={"die_after_answers": 4}, job={"max_restarts": 0})
    result = run("job", str(job))
    assert result.exit_code == 1, result.output
    assert "gave up after 0 restarts ([job] max_restarts)" in result.output
    data = record(job)
    assert data["stages"]["generate"]["status"] == "failed"
    # what job.json says is what happened: the engine the job started was stopped
    assert (
        data["stages"]["down"]["status"] == "done"
        and data["stages"]["down"]["evidence"]["stopped"] == "jobsrv"
    )
    assert run_state(run_home)["phase"] in ("stopped", "failed")


def test_flags_override_the_file_for_one_run(make_job: JobFactory, run_home: Path, tmp_path: Path) -> None:
    job = make_job(rows=6)
    elsewhere = tmp_path / "elsewhere"
    result = run("job", str(job), "--output", str(elsewhere), "--keep-servers", "--json")
    try:
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        assert shown["output"] == str(elsewhere) and shown["stages"]["down"]["status"] == "skipped"
        assert not (job.parent / "out").exists()
        assert sorted(output_ids(elsewhere)) == sorted(f"q{i}" for i in range(6))
        assert run_state(run_home)["phase"] == "ready"  # kept running, as --keep-servers asked
    finally:
        run("down", "jobsrv")


def test_flagged_rows_left_out_of_the_export_are_counted_and_said(
    make_job: JobFactory, run_home: Path
) -> None:
    """The H200 job (random weights: 1,999 of 2,000 answers cut at max_tokens) exported 1 row
    and said nothing of the rest."""
    job = make_job(rows=6, standin={"faults": {"latency_s": 0.01, "cut_marker": "question 4"}})
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    assert "export: 1 flagged rows left out (see `specpilot report" in result.output
    assert "[job] include_flagged = true keeps them" in result.output
    export = record(job)["stages"]["export"]["evidence"]
    assert export["flagged_left_out"] == 1 and export["formats"]["specforge"]["rows"] == 5
    assert len((job.parent / "out" / "specforge.jsonl").read_text().splitlines()) == 5
    # asking for them is a changed export: refused until the export is run again
    job.write_text(
        job.read_text().replace('export = ["specforge"]', 'export = ["specforge"]\ninclude_flagged = true')
    )
    refused = run("job", str(job))
    assert refused.exit_code == 2 and "[job] export / include_flagged" in refused.output
    again = run("job", str(job), "--restart-from", "export")
    assert again.exit_code == 0, again.output
    assert "left out" not in again.output
    assert len((job.parent / "out" / "specforge.jsonl").read_text().splitlines()) == 6
    assert record(job)["stages"]["export"]["evidence"]["flagged_left_out"] == 0


def test_restart_from_export_writes_the_exports_again(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(rows=6)
    assert run("job", str(job)).exit_code == 0
    rewrite = job.read_text().replace('export = ["specforge"]', 'export = ["specforge", "speculators"]')
    job.write_text(rewrite)
    refused = run("job", str(job))
    assert refused.exit_code == 2 and "--restart-from export" in refused.output
    again = run("job", str(job), "--restart-from", "export")
    assert again.exit_code == 0, again.output
    data = record(job)
    assert set(data["stages"]["export"]["evidence"]["formats"]) == {"specforge", "speculators"}
    assert data["stages"]["generate"]["attempts"] == 1
    assert (job.parent / "out" / "speculators.jsonl").is_file()


def test_a_plan_that_does_not_fit_stops_the_job_before_any_start(
    make_job: JobFactory, run_home: Path
) -> None:
    job = make_job(gpu_memory_gib=0.5)
    result = run("job", str(job))
    assert result.exit_code == 1, result.output
    assert "the plan does not fit" in result.output
    data = record(job)
    assert data["stages"]["check"]["status"] == "done" and data["stages"]["plan"]["status"] == "failed"
    assert not (run_home.parent / "state" / "runs").exists()  # nothing was started


def test_a_failed_stage_under_json_is_one_object_on_stdout_and_its_line_on_stderr(
    make_job: JobFactory, run_home: Path
) -> None:
    """A script reads the failure from stdout; a person watching stderr sees the same one
    line as without --json (it was missing there)."""
    job = make_job(gpu_memory_gib=0.5)
    result = run("job", str(job), "--json")
    assert result.exit_code == 1, result.output
    shown = json.loads(result.stdout)
    assert shown["exit"] == 1 and shown["output"] == str(job.parent / "out") and shown["fix"] is None
    assert shown["error"].startswith("the plan does not fit")
    assert result.stderr.splitlines()[-1] == f"error: {shown['error']}"


REPO = Path(__file__).resolve().parents[2]
H200_LOGS = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"


def test_a_start_out_of_memory_is_planned_again_and_the_job_goes_on(run_home: Path, tmp_path: Path) -> None:
    """A capture OOM at start (the real SGLang 0.5.17 H200 logs, replayed by the flags the engine
    gets): the plan's next step down from what the engine printed, recorded, then the job."""
    logs = {"0.94": str(H200_LOGS / "r17-plain-rec-96.log"), "0.93": str(H200_LOGS / "r17-plain-rec2-96.log")}
    env = config_env(replay=logs, answers="echo", faults={"latency_s": 0.01})
    spec = tmp_path / "replay.toml"
    spec.write_text(
        f'name = "jobreplay"\n[model]\npath = "{REPO / "gpu" / "models" / "qwen3.6-27b"}"\n'
        '[gpu]\nmemory_gib = 95.6\n[engine]\nname = "sglang"\nversion = "0.5.17"\n'
        f"command = {json.dumps([sys.executable, str(FAKES / 'standin.py')])}\n"
        'args = ["--context-length", "32768", "--mem-fraction-static", "0.94", "--max-mamba-cache-size", "200", '
        '"--max-running-requests", "40"]\n'
        f"env = {{ {CONFIG_ENV} = {json.dumps(env[CONFIG_ENV])} }}\n"
        f'[server]\nport = {free_port()}\nready_timeout_s = 60\n[host]\ntarget = "local"\n'
    )
    (tmp_path / "prompts.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(5))
    )
    job = tmp_path / "job.toml"
    job.write_text('[job]\nserver = "replay.toml"\nprompts = "prompts.jsonl"\noutput = "out"\n')
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "job.json").read_text())
    [change] = data["stages"]["up"]["evidence"]["replans"]
    assert "--mem-fraction-static 0.94 -> 0.93" in change["changes"]
    assert data["server_args"][data["server_args"].index("--mem-fraction-static") + 1] == "0.93"
    assert "re-plan 1:" in result.output
    assert sorted(output_ids(tmp_path / "out")) == [f"q{i}" for i in range(5)]
