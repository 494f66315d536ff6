"""A job with [job.bench]: bench first (the argv-driven stand-in), then the winner is what
`up` starts, and the whole input's cost is projected from the bench before it starts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.launch.server_plan import ServerPlanRecord
from tests.bench.conftest import SpecFactory, bench_spec, run_home, write_prompts  # noqa: F401  (fixtures used here)
from tests.job.conftest import output_ids

#: per draft-token count: NEXTN at 2 finishes the job clearly first
PROFILES = {
    "0": {"step_s": 0.03, "accept": 1.0, "cap": 12},
    "1": {"step_s": 0.03, "accept": 1.5, "cap": 12},
    "2": {"step_s": 0.03, "accept": 3.0, "cap": 12},
    "3": {"step_s": 0.03, "accept": 3.2, "cap": 4},
}


def test_the_bench_winner_is_what_the_job_starts(
    bench_spec: SpecFactory,  # noqa: F811
    run_home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    spec = bench_spec(PROFILES)
    write_prompts(tmp_path / "prompts.jsonl", 40)
    job = tmp_path / "job.toml"
    job.write_text(
        f'[job]\nserver = "{spec.name}"\nprompts = "prompts.jsonl"\noutput = "out"\nexport = ["parquet"]\n'
        "concurrency = 8\nmin_clean_yield = 50\n[job.sampling]\nmax_tokens = 24\n"
        '[job.bench]\nsample = 16\nvariants = "plain,NEXTN:2"\nbudget_s = 60\n'
    )
    result = CliRunner().invoke(cli, ["job", str(job)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "job.json").read_text())
    bench = data["stages"]["bench"]["evidence"]
    # the search's points are configurations at running-request caps (label@cap)
    assert bench["winner"].startswith("NEXTN-2@")
    assert {v["label"].split("@")[0] for v in bench["table"]} == {"plain", "NEXTN-2"}
    assert (tmp_path / "out" / "bench.svg").is_file()  # charted as `specpilot bench` charts it
    started = data["stages"]["up"]["evidence"]["args"]
    winner_argv = next(v["argv"] for v in bench["table"] if v["label"] == bench["winner"])
    assert started[: len(winner_argv)] == winner_argv  # the winner's flags (+ what up adds)
    # the server plan recorded is the winner's, the one `up` started, not the server spec's
    recorded = ServerPlanRecord.from_json(bench["server_plan"])
    assert recorded.source == str(tmp_path / "out" / "best.toml")
    assert recorded == ServerPlanRecord.from_json(data["stages"]["up"]["evidence"]["server_plan"])
    assert recorded.args[: len(winner_argv)] == tuple(winner_argv)
    assert data["projection"]["rows"] == 40 and data["projection"]["wall_s"] > 0
    assert "projected for the whole input: 40 rows" in result.output
    assert sorted(output_ids(tmp_path / "out")) == sorted(f"q{i}" for i in range(40))
    assert data["stages"]["bench"]["gpu_hours"] > 0
