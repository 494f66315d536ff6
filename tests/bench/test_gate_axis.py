"""bench's prefill-graph and layout axes from what plan knows: a configuration whose plan lands
near SGLang 0.5.17's prefill-graph gate brings the gate's other side into the search (planned,
at the plan's own knobs for that side); the axis lines say per configuration which side of the
gate it is on, and what of the layout is measured and what only projected."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

from specpilot.bench.lab import EngineLab, gate_axis, layout_axis, other_side
from specpilot.bench.measure import Measured, Settings
from specpilot.bench.render import winner_line
from specpilot.bench.run import BenchResult
from specpilot.bench.variants import Variant
from specpilot.check.resolved import release_of
from specpilot.generate.sampling import Sampling
from specpilot.plan.types import PrefillGate
from specpilot.spec import Spec, parse_spec
from tests.bench.conftest import BENCH_ENGINE, specpilot, write_prompts
from tests.fakeengines.standin import config_env
from tests.fixtures.engines import free_port

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "models" / "qwen3.6-27b"
#: the incident's speculative flags on 0.5.17 with a 2,048-token chunk: plain's recommendation
#: leaves about 2.4 GiB free at the prefill graph's capture on a 79.6 GiB card (below the 4 GiB
#: gate), every speculative one more than 5 GiB (not near)
ARGS = [
    "--context-length", "32768",
    "--chunked-prefill-size", "2048",
    "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--mamba-radix-cache-strategy", "extra_buffer",
]  # fmt: skip


def _spec(version: str = "0.5.17") -> Spec:
    return parse_spec(
        {"name": "g", "model": {"path": str(MODEL)}, "gpu": {"memory_gib": 79.6},
         "engine": {"name": "sglang", "version": version, "args": ARGS,
                    "env": {"SGLANG_ENABLE_SPEC_V2": "1"}}}
    )  # fmt: skip


def _lab(spec: Spec, tmp_path: Path) -> EngineLab:
    settings = Settings(
        tmp_path / "s.jsonl", tmp_path / "w.jsonl", 8, Sampling(thinking=False), 60.0, 5.0, 0.0, 60.0
    )
    return EngineLab(spec, release_of(spec), settings, [], tmp_path, lambda line: None)


def test_a_configuration_near_the_gate_brings_its_other_side_planned_at_its_own_knobs(tmp_path: Path) -> None:
    lab = _lab(_spec(), tmp_path)
    plain = lab.plan(Variant())
    far = lab.plan(Variant("NEXTN", 3))
    assert far.other_side is None and plain.other_side is not None
    side = plain.other_side
    assert side.label == "plain-graph-kept" and side.prefill_graph == "kept" and not side.replan
    kept = lab.plan(side)
    assert kept.refused is None and kept.other_side is None  # a side brings no further side
    assert kept.max_running_requests is not None and plain.max_running_requests is not None
    assert kept.max_running_requests <= plain.max_running_requests  # the graph's room is KV's loss
    prepared = lab.prepared[side]
    args = prepared.spec.engine.args
    fraction = args[len(args) - 1 - args[::-1].index("--mem-fraction-static") + 1]
    assert fraction == side.side_args[side.side_args.index("--mem-fraction-static") + 1]
    assert prepared.plan is not None and prepared.plan.prefill_gate is not None
    assert prepared.plan.prefill_gate.graph_kept
    # a cap of the side keeps the side's fraction
    capped = lab.prepare(side.at(4))
    assert capped.plan is not None and capped.plan.prefill_gate is not None
    assert capped.plan.prefill_gate.graph_kept and capped.plan.max_running_requests == 4
    line = gate_axis("SGLang 0.5.17", lab.gates)
    assert "plain: 2." in line and "against the 4.00 GiB gate; added beside it: plain-graph-kept" in line
    assert "NEXTN-3: 5." in line and "not near" in line


def test_a_release_without_the_gate_says_so_for_the_axis(tmp_path: Path) -> None:
    lab = _lab(_spec("0.5.18"), tmp_path)
    assert lab.plan(Variant()).other_side is None
    assert gate_axis("SGLang 0.5.18", lab.gates) == (
        "prefill CUDA graph on/off: not explored (no configuration's plan meets a prefill-graph gate: "
        "SGLang 0.5.18 has none, or captures no prefill graph at the planned knobs)"
    )


def test_the_graph_off_side_plans_again_and_a_near_gate_with_nothing_fitting_adds_nothing() -> None:
    above = PrefillGate(4.0, 4.4, graph_kept=True, near=True, other_side_args=("--disable-prefill-cuda-graph",),
                        replan=True, other_side="prefill eager")  # fmt: skip
    side = other_side(Variant("NEXTN", 2), above)
    assert side is not None and side.label == "NEXTN-2-graph-off" and side.replan
    stuck = PrefillGate(4.0, 3.0, graph_kept=False, near=True, other_side="no fraction from 0.90 down fits")
    assert other_side(Variant(), stuck) is None
    line = gate_axis("SGLang 0.5.16", {Variant(): stuck})
    assert "plain: 3.00 GiB" in line and "near; no fraction from 0.90 down fits" in line


def test_the_layout_line_says_what_is_measured_and_what_projected() -> None:
    assert layout_axis(1, 1) == "layout: one GPU (one engine: no layout to compare)"
    assert layout_axis(2, 2).startswith("layout: one engine of 2 GPUs")
    eight = layout_axis(1, 8)
    assert "measured: one engine of 1 GPU " in eight and "projected, not measured: 8 such engines" in eight
    odd = layout_axis(2, 5)
    assert "2 such engines side by side on 5 GPUs" in odd and "1 GPU left idle" in odd


def test_bench_measures_the_side_that_keeps_the_graph_and_writes_its_knobs(
    tmp_path: Path, run_home: Path
) -> None:
    """The stand-in captures its prefill graph only at --mem-fraction-static 0.93 or below, and
    prefills six times slower without it: plain's plan (0.95, below the gate) brings
    plain-graph-kept (0.93, fewer requests), which finishes the job first and is written."""
    profiles = {
        "0": {"step_s": 0.02, "accept": 1.0, "prefill_s": 0.02, "prefill_eager_factor": 6.0,
              "prefill_graph_to_fraction": 0.93},
    }  # fmt: skip
    env = {"SGLANG_ENABLE_SPEC_V2": "1", **config_env(answers="batch", profiles=profiles)}
    spec = tmp_path / "g.toml"
    spec.write_text(
        f"""name = "g"
[model]
path = "{MODEL}"
served_name = "fake-model"
[gpu]
name = "stand-in"
memory_gib = 79.6
[engine]
name = "sglang"
version = "0.5.17"
command = {json.dumps([sys.executable, str(BENCH_ENGINE)])}
args = {json.dumps(ARGS)}
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}
[server]
port = {free_port()}
ready_timeout_s = 15
"""
    )
    prompts = write_prompts(tmp_path / "prompts.jsonl", 300)
    job, best = tmp_path / "job", tmp_path / "best.toml"
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", job, "--sample", 40, "--max-tokens", 64,
        "--budget-s", 90, "--warmup-s", 3, "--variants", "plain", "--write", best,
    )  # fmt: skip
    assert ran.code == 0, ran.output
    result = json.loads((job / "bench.json").read_text())
    rows = {v["label"]: v for v in result["variants"]}
    kept = [label for label in rows if label.startswith("plain-graph-kept@")]
    assert len(kept) == 3 and result["winner"] in kept, {k: v["search"] for k, v in rows.items()}
    assert any(line.startswith("prefill CUDA graph on/off: plain: ") for line in result["search"]["axes"])
    # plan --job plays the winner's job with bench's own model on what bench.json keeps
    lengths = result["output_lengths"]
    assert lengths and sum(lengths) / len(lengths) == pytest.approx(result["mean_output_tokens"], abs=0.05)
    planned = specpilot("plan", spec, "--job", job, "--json")
    assert planned.code == 0, planned.output
    again = json.loads(planned.stdout)["projection"][f"bench's winner ({result['winner']})"]
    assert again["wall_s"] == pytest.approx(rows[result["winner"]]["projected_s"], rel=0.01)
    assert again["tail_share"] == pytest.approx(rows[result["winner"]]["tail_share"], abs=0.01)
    written = tomllib.loads(best.read_text())["engine"]["args"]
    assert written[written.index("--mem-fraction-static") + 1] == "0.93"
    assert written[-2:] == ["--max-running-requests", result["winner"].split("@")[1]]


def test_the_winner_line_says_the_servers_beside_the_measured_one_are_projected() -> None:
    spec = _spec()
    row = Measured("plain@8", "measured", max_running_requests=8, output_tokens_per_s=900.0)
    row.projected_s, row.tail_share, row.gpu_hours = 3600.0, 0.05, 4.0

    def line(servers: int) -> str:
        result = BenchResult(spec, [row], {}, "plain@8", 1000, 64, 300.0, {"servers": servers}, [], [], True)
        return winner_line(result)

    assert "on 4 servers of 1 GPU (one measured, 4 projected side by side) at 8 running" in line(4)
    assert "on 1 server of 1 GPU at 8 running" in line(1)
