"""`specpilot job` over a fleet (the real `smg` router, stand-in members): a member that dies
mid-job is repaired by fleet-repair's pass in the job's own event loop."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli
from tests.fleet.conftest import FleetFactory, make_fleet, smg, smg_path  # noqa: F401  (fixtures used here)
from tests.job.conftest import output_ids
from tests.launch.conftest import make_spec, run_home  # noqa: F401  (fixtures used here)


def test_a_fleet_job_repairs_a_member_that_dies(
    smg: str,  # noqa: F811
    make_fleet: FleetFactory,  # noqa: F811
    run_home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    once = tmp_path / "died-once"
    env = {
        "SPECPILOT_FAKE_ANSWER_S": "0.1",
        "SPECPILOT_FAKE_DIE_AFTER": "6",
        "SPECPILOT_FAKE_DIE_ONCE": str(once),
    }
    fleet = make_fleet([{"target": "local", "gpus": 2}], name="jfl", env=env)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"q {i}"}) + "\n" for i in range(300)))
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nfleet = "{fleet.name}"\nprompts = "prompts.jsonl"\noutput = "out"\nconcurrency = 1\n'
        "export = []\n[job.sampling]\nmax_tokens = 8\n"
    )
    try:
        result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert once.exists()
        assert sorted(output_ids(tmp_path / "out")) == sorted(f"q{i}" for i in range(300))
        data = json.loads((tmp_path / "out" / "job.json").read_text())
        assert [r["action"] for r in data.get("restarts", [])] == ["restarted"], result.output
        assert data["stages"]["down"]["evidence"]["stopped"] == "jfl"
    finally:
        CliRunner().invoke(cli, ["down", "jfl"])
