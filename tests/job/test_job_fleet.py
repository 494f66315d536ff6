"""`specpilot job` over a fleet (the real `smg` router, stand-in members): members that die
mid-job are repaired by fleet-repair's pass in the job's own event loop. Both die (once each),
so the job cannot finish on the survivors: it finishes because they were repaired."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.fleet.spec import load_fleet
from tests.fleet.conftest import FleetFactory, make_fleet, smg, smg_path  # noqa: F401  (fixtures used here)
from tests.job.conftest import output_ids
from tests.launch.conftest import make_spec, run_home  # noqa: F401  (fixtures used here)


def test_a_fleet_job_repairs_a_member_that_dies(
    smg: str,  # noqa: F811
    make_fleet: FleetFactory,  # noqa: F811
    run_home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    standin = {
        "answers": "echo",
        "faults": {"latency_s": 0.02},
        "die_after_answers": 6,
        "die_once_file": str(tmp_path / "died-{port}"),
    }
    fleet = make_fleet([{"target": "local", "gpus": 2}], name="jfl", standin=standin)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(60)))
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nfleet = "{fleet.name}"\nprompts = "prompts.jsonl"\noutput = "out"\nconcurrency = 1\n'
        "export = []\n[job.sampling]\nmax_tokens = 8\n"
    )
    try:
        result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert len(list(tmp_path.glob("died-*"))) == 2  # both members died
        assert sorted(output_ids(tmp_path / "out")) == sorted(f"q{i}" for i in range(60))
        data = json.loads((tmp_path / "out" / "job.json").read_text())
        repaired = sorted((r["run"], r["action"]) for r in data.get("restarts", []))
        assert repaired == [("jfl-0", "restarted"), ("jfl-1", "restarted")], result.output
        assert data["stages"]["down"]["evidence"]["stopped"] == "jfl"
    finally:
        CliRunner().invoke(cli, ["down", "jfl"])


@pytest.mark.timeout(120)
def test_a_fleet_job_restarts_a_member_that_stalls_and_leaves_the_busy_one(
    smg: str,  # noqa: F811
    make_fleet: FleetFactory,  # noqa: F811
    run_home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """One member hangs (alive, /health answering, its requests never answered): the router
    still answers through the other, so only the member's own metrics show it. It is taken out,
    stopped, restarted and registered again; the other, busy all along, is left alone."""
    standin = {
        "answers": "echo",
        "metrics": "vllm",
        "faults": {"latency_s": 0.05},
        "stall_after_answers": 6,
        "stall_once_file": str(tmp_path / "stalled-{port}"),
    }
    path = make_fleet([{"target": "local", "gpus": 2}], name="jfs", standin=standin)
    first, second = load_fleet(path).members
    (tmp_path / f"stalled-{first.spec.server.port}").write_text("")  # the first never stalls
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(60)))
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nfleet = "{path.name}"\nprompts = "prompts.jsonl"\noutput = "out"\nconcurrency = 2\n'
        "stall_after_s = 2.0\nexport = []\n[job.sampling]\nmax_tokens = 8\n"
    )
    try:
        result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert (tmp_path / f"stalled-{second.spec.server.port}").read_text()  # it did stall (its pid)
        assert sorted(output_ids(tmp_path / "out")) == sorted(f"q{i}" for i in range(60))
        restarts = json.loads((tmp_path / "out" / "job.json").read_text()).get("restarts", [])
        assert [(r["run"], r["cause"], r["action"]) for r in restarts] == [
            (second.name, "stall", "restarted")
        ]
        assert "no token progress for" in restarts[0]["line"]
        assert restarts[0]["restarts"] == 1
        assert f"{second.name} stalled: no token progress" in result.output
    finally:
        CliRunner().invoke(cli, ["down", "jfs"])
