"""The fleet file: members, ports, GPUs and plans per GPU type (no process started)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from specpilot.fleet.spec import is_fleet_file, load_fleet
from specpilot.fleet.up import preflight_per_gpu

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet" / "qwen36-fleet.toml"


def test_the_example_fleet_expands_to_one_member_per_gpu() -> None:
    fleet = load_fleet(EXAMPLE)
    assert is_fleet_file(EXAMPLE) and not is_fleet_file(EXAMPLE.parent / "qwen36-member.toml")
    members = fleet.members
    assert [m.name for m in members] == [f"qwen36-fleet-{i}" for i in range(11)]
    gpu_a = [m for m in members if m.spec.host.target == "ssh://root@gpu-a:22"]
    assert [m.worker_url for m in gpu_a] == [f"http://gpu-a:{30000 + i}" for i in range(8)]
    assert [m.spec.engine.env["CUDA_VISIBLE_DEVICES"] for m in gpu_a] == [str(i) for i in range(8)]
    assert all(m.spec.engine.env["SGLANG_ENABLE_SPEC_V2"] == "1" for m in members)  # the spec's own env kept
    last = members[-1]
    assert last.worker_url == "http://10.0.0.7:30000" and "CUDA_VISIBLE_DEVICES" not in last.spec.engine.env
    assert last.gpu_key == (139.8, "H200", 1) and members[0].gpu_key[1] == "RTX PRO 6000 Blackwell"
    assert fleet.router_url == "http://127.0.0.1:30080" and fleet.metrics_port == 30081


def test_plans_once_per_gpu_type() -> None:
    plans = asyncio.run(preflight_per_gpu(load_fleet(EXAMPLE), lambda line: None))
    assert set(plans) == {(95.6, "RTX PRO 6000 Blackwell", 1), (139.8, "H200", 1)}
    kv = {key: pre.plan.kv_tokens for key, pre in plans.items() if pre.plan}
    assert kv[(139.8, "H200", 1)] > kv[(95.6, "RTX PRO 6000 Blackwell", 1)]  # each card planned on its own
