"""`specpilot bench` against stand-in engines whose speed and acceptance follow their argv.

Each stand-in variant runs min(its own cap, --max-running-requests) requests at once and
gives each `accept` tokens per `step_s`; the profiles are drawn from a seed here, so bench
cannot know the winner in advance: it must measure it. Every test ends with no stand-in
left running.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.bench.conftest import ROOT, SpecFactory, live_runs, specpilot, write_prompts

SAMPLE_ROWS = 48
MAX_TOKENS = 48
#: the winner's true rate must beat the runner-up's by this much (the stand-ins share 2 CPUs)
SEPARATION = 1.35


def true_rate(profile: dict[str, float]) -> float:
    """Output tok/s of a stand-in with more requests waiting than it runs at once."""
    return min(profile["cap"], SAMPLE_ROWS) * profile["accept"] / profile["step_s"]


def random_profiles(seed: int) -> dict[str, dict[str, float]]:
    """More draft tokens: higher acceptance but fewer requests at once, in random measure,
    until one variant is clearly the fastest (which one depends on the seed)."""
    rng = random.Random(seed)
    while True:
        profiles: dict[str, dict[str, float]] = {}
        accept, cap = 1.0, rng.randint(10, 16)
        for k in range(4):
            profiles[str(k)] = {"step_s": rng.uniform(0.02, 0.04), "accept": accept, "cap": cap}
            accept += rng.uniform(0.3, 1.0)
            cap = max(2, cap - rng.randint(1, 5))
        rates = sorted((true_rate(p) for p in profiles.values()), reverse=True)
        if rates[0] >= SEPARATION * rates[1]:
            return profiles


def label_of(k: str) -> str:
    return "plain" if k == "0" else f"NEXTN-{k}"


@pytest.mark.parametrize("seed", [3, 7, 16])  # winners: NEXTN-1, plain, NEXTN-3
def test_bench_picks_the_variant_that_truly_finishes_first(
    seed: int, bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    profiles = random_profiles(seed)
    truth = label_of(max(profiles, key=lambda k: true_rate(profiles[k])))
    spec = bench_spec(profiles)
    prompts = write_prompts(tmp_path / "prompts.jsonl", 300)
    job, best = tmp_path / "job", tmp_path / "best.toml"
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", job, "--sample", SAMPLE_ROWS,
        "--max-tokens", MAX_TOKENS, "--budget-s", 120, "--warmup-s", 3, "--write", best,
        "--variants", "plain,NEXTN:1,NEXTN:2,NEXTN:3",
    )  # fmt: skip
    assert ran.code == 0, ran.output
    result = json.loads((job / "bench.json").read_text())
    rows = {v["label"]: v for v in result["variants"]}
    rates = {k: (v["search"], v["output_tokens_per_s"]) for k, v in rows.items()}
    winner = result["winner"]
    assert winner.split("@")[0] == truth, (profiles, rates)
    configs = ["plain", "NEXTN-1", "NEXTN-2", "NEXTN-3"]
    assert [label.split("@")[0] for label in rows] == [c for c in configs for _ in range(3)]
    screens = [rows[label] for label in rows if label.endswith(f"@{max(caps(rows, label))}")]
    assert len(screens) == 4
    for row in screens:  # each configuration started once at its largest cap, with one batch
        assert row["search"] in ("screened", "measured") and row["status"] == "measured", rates
        assert row["rows_done"] > 0 and row["ttft_ms"]["p50"] > 0
        assert sum(row["finish_reasons"].values()) == row["rows_done"]
    for label, row in rows.items():
        cap = label.split("@")[1]
        # each point runs at the knobs its own plan recommends, its running requests capped
        args = row["recommended_args"]
        assert args[args.index("--max-running-requests") + 1] == cap
        assert row["projected_s"] > 0 and 0 < row["tail_share"] < 1 and row["gpu_hours"] > 0
    assert rows[winner]["search"] == "measured"
    assert (
        rows[winner]["rows_done"]
        == result["sample"]["rows"]
        >= 2 * max(int(label.split("@")[1]) for label in rows)
        or rows[winner]["budget_reached"]
    )
    for k in ("1", "2", "3"):  # the acceptance SGLang reports: the stand-in's own mean
        row = next(
            rows[label] for label in rows if label.startswith(f"NEXTN-{k}@") and rows[label]["rows_done"]
        )
        assert row["accept_length"] == pytest.approx(profiles[k]["accept"], abs=0.35)
    # the winning spec, with the winner's flags (its cap included), loads as a spec
    written = tomllib.loads(best.read_text())
    assert written["engine"]["args"] == rows[winner]["argv"]
    args = written["engine"]["args"]
    assert args[args.index("--max-running-requests") + 1] == winner.split("@")[1]
    assert (Path(written["model"]["path"]) / "config.json").is_file()  # found from anywhere
    assert "winner: " + winner in ran.stdout and "GPU-hours" in ran.stdout and "axis layout" in ran.stdout
    svg = (job / "bench.svg").read_text()
    assert svg.count('class="variant"') == 12 and f'data-label="{winner}"' in svg
    # the full sample, the rows bench.json names, went to the winner
    folder = job / "bench" / winner.replace("@", "-at-") / "sample" / "sample"
    parts = sorted(folder.glob("*/part-*.jsonl"))
    sent = {json.loads(line)["id"] for part in parts for line in part.read_text().splitlines()}
    assert sent == set(result["sample"]["ids"])
    # the job's own folder holds no ledger: bench keeps its scratch jobs under bench/
    assert not (job / "ledger.sqlite").exists()
    assert all(not members for members in live_runs(Path(os.environ["SPECPILOT_HOME"])).values())


def caps(rows: dict[str, dict[str, object]], label: str) -> list[int]:
    """The caps searched for `label`'s configuration."""
    config = label.split("@")[0]
    return [int(other.split("@")[1]) for other in rows if other.split("@")[0] == config]


def test_a_variant_that_dies_and_one_check_refuses_stay_in_the_table(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    profiles = {
        "0": {"step_s": 0.02, "accept": 1.0, "cap": 8},
        "2": {"die": "sglang_oom_cuda_graph"},
    }
    spec = bench_spec(profiles)
    prompts = write_prompts(tmp_path / "prompts.jsonl", 40)
    job = tmp_path / "job"
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", job, "--sample", 16, "--max-tokens", 16,
        "--variants", "plain,NEXTN:2,DFLASH:1", "--budget-s", 60, "--warmup-s", 5,
        "--write", tmp_path / "best.toml",
    )  # fmt: skip
    # plain alone was measured: nothing was compared, so no winner (exit 1), and the line says why
    assert ran.code == 1, ran.output
    result = json.loads((job / "bench.json").read_text())
    assert result["winner"] is None and result["search"]["compared"] == ["plain"]
    assert "no winner: a winner needs two configurations" in ran.stdout
    assert "not measured: NEXTN-2 (failed: did not start" in result["search"]["verdict"]
    assert "s of --budget-s would screen them too" in result["search"]["verdict"]
    assert not (tmp_path / "best.toml").exists()  # --write writes nothing without a winner
    rows = {v["label"]: v for v in result["variants"]}
    plain = [label for label in rows if label.startswith("plain@")]
    assert rows[plain[0]]["status"] == "measured"
    nextn = [label for label in rows if label.startswith("NEXTN-2@")]
    assert rows[nextn[0]]["status"] == "failed" and "did not start" in rows[nextn[0]]["reason"]
    # its lower caps are never started: their configuration does not start
    assert all(rows[label]["search"] == "not started" for label in nextn[1:])
    assert rows["DFLASH-1"]["status"] == "refused"
    assert rows["DFLASH-1"]["reason"].startswith("check refuses it: sglang-dflash-needs-draft")
    assert "DFLASH-1: not started: check refuses it" in ran.stderr
    runs = live_runs(Path(os.environ["SPECPILOT_HOME"]))
    assert "qb-bench-dflash-1" not in runs  # refused: never started
    assert runs and all(not members for members in runs.values())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_mid_bench_stops_every_server(
    sig: signal.Signals, bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    slow = {"step_s": 0.05, "accept": 1.0, "cap": 4}
    spec = bench_spec({"0": slow, "1": slow})
    prompts = write_prompts(tmp_path / "prompts.jsonl", 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "specpilot", "bench", str(spec), "--prompts", str(prompts),
            "--job", str(tmp_path / "job"), "--sample", "32", "--max-tokens", "4000",
            "--variants", "plain,NEXTN:1", "--budget-s", "900", "--warmup-s", "2"]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    lines = []
    deadline_s = time.monotonic() + 90
    for line in process.stderr:
        lines.append(line)
        if "measuring" in line or time.monotonic() > deadline_s:
            break
    measuring = [line for line in lines if re.search(r"plain@\d+: measuring", line)]
    assert measuring, lines
    label = measuring[0].split(":")[0].split()[-1]
    time.sleep(1.0)  # requests in flight, tokens streaming
    process.send_signal(sig)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 130, "".join(lines) + rest
    assert f"{label}: stopped" in rest and "every server this bench started is stopped" in rest
    runs = live_runs(Path(os.environ["SPECPILOT_HOME"]))
    name = "qb-bench-" + label.replace("@", "-at-")
    assert list(runs) == [name]  # no other point started
    assert runs[name] == []


def test_a_spec_without_speculation_measures_what_it_can_and_says_so(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    spec = bench_spec({"0": {"step_s": 0.02, "accept": 1.0, "cap": 8}}, args=["--context-length", "32768"])
    prompts = write_prompts(tmp_path / "prompts.jsonl", 60)
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", tmp_path / "job", "--sample", 8,
        "--max-tokens", 8, "--budget-s", 60, "--warmup-s", 2, "--json", "--min-p", 0.05, "--stop", "###",
        "--write", tmp_path / "best.toml",
    )  # fmt: skip
    assert ran.code == 0, ran.output
    # one configuration may win alone: best.toml and the notes say nothing was compared
    written = (tmp_path / "best.toml").read_text()
    assert written.startswith("# specpilot bench: one configuration searched (plain): nothing was compared\n")
    assert tomllib.loads(written)["name"] == "qb"
    # every start recorded how long it took to be ready: the next bench budgets starts by it
    states = [
        json.loads(f.read_text()) for f in (Path(os.environ["SPECPILOT_HOME"]) / "runs").glob("*/state.json")
    ]
    assert states and all(state["ready_s"] > 0 for state in states)
    # the job's own sampling, generate's options: bench.json says what was sent
    sampling = json.loads(ran.stdout)["sampling"]
    assert sampling["max_tokens"] == 8 and sampling["request_fields"] == {"min_p": 0.05, "stop": ["###"]}
    assert "speculation: plain only (the spec turns on no speculative method" in ran.stderr
    result = json.loads(ran.stdout)
    assert {v["label"].split("@")[0] for v in result["variants"]} == {"plain"}
    assert result["winner"].startswith("plain@")
    assert "one configuration searched (plain): nothing was compared" in result["search"]["notes"]
    assert result["projection"]["rows"] == 60


def test_a_sample_longer_than_the_budget_is_cut_and_measured_as_far_as_it_got(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    spec = bench_spec({"0": {"step_s": 0.03, "accept": 1.0, "cap": 4}})
    prompts = write_prompts(tmp_path / "prompts.jsonl", 60)
    started_s = time.monotonic()
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", tmp_path / "job", "--sample", 32,
        "--max-tokens", 100, "--variants", "plain", "--budget-s", 30, "--warmup-s", 1,
    )  # fmt: skip
    took_s = time.monotonic() - started_s
    assert ran.code == 0, ran.output
    rows = json.loads((tmp_path / "job" / "bench.json").read_text())["variants"]
    # the screen's 57 rows (the plan's cap; the file's 60 are the sample) of 40 to 100 tokens,
    # 4 at a time at 33 tok/s each (the stand-in sleeps its steps), take 28 s at the least: the
    # screen, given what is left of the 30 s budget after its start and warm-up, is cut however
    # fast the machine; a loaded one still has seconds after the start for rows to finish
    row = rows[0]
    assert row["search"] == "screened" and row["budget_reached"]
    assert 0 < row["rows_done"] < 57 and row["output_tokens_per_s"] > 0
    assert took_s < 30 + 30  # the budget, then the stop and the process start around it
    assert all(not members for members in live_runs(Path(os.environ["SPECPILOT_HOME"])).values())


def test_a_spec_starting_its_engine_with_a_key_is_benched_with_that_key(
    bench_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    """The variants start with the spec's --api-key, and the bench sent its requests without
    it: every one a 401, 'no request was answered', no winner."""
    key = "sk-PLANTED-bench-41d7"
    spec = bench_spec(
        {"0": {"step_s": 0.02, "accept": 1.0, "cap": 8}}, args=["--context-length", "32768", "--api-key", key]
    )
    prompts = write_prompts(tmp_path / "prompts.jsonl", 60)
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", tmp_path / "job", "--sample", 8,
        "--max-tokens", 8, "--budget-s", 60, "--warmup-s", 2, "--json",
    )  # fmt: skip
    assert ran.code == 0, ran.output
    assert json.loads(ran.stdout)["winner"].startswith("plain@")
    assert key not in ran.output and key not in (tmp_path / "job" / "bench.json").read_text()
