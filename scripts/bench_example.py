"""Run the README's `specpilot bench` example on the stand-in engine and print what it prints,
then the `projected` lines `specpilot plan --job` prints from its result.

    python scripts/bench_example.py        # about two minutes on 2 cores

The stand-in is tests/fakeengines/standin.py answering as a batch loop, whose speed follows
its argv: each step takes longer with more requests running, and 1.8x longer past 26 of them
(its captured graphs), so the fastest cap is below the plan's maximum. The spec, prompts and
state live in a temporary folder; the README's block is this script's output, pasted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.bench.conftest import BENCH_ENGINE, MODEL_CONFIG, SPECULATIVE_ARGS, write_prompts  # noqa: E402
from tests.fakeengines.standin import config_env  # noqa: E402
from tests.fixtures.engines import free_port  # noqa: E402

PROFILES = {
    str(k): {
        "step_s": 0.02 + 0.004 * k,
        "step_per_request_s": 0.0003 * (k + 1),
        "accept": 1.0 + 0.6 * k,
        "graph_max_bs": 26,
        "eager_factor": 1.8,
    }
    for k in range(4)
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "model").mkdir()
        shutil.copy(MODEL_CONFIG, root / "model" / "config.json")
        env_table = {"SGLANG_ENABLE_SPEC_V2": "1", **config_env(answers="batch", profiles=PROFILES)}
        spec = root / "standin.toml"
        spec.write_text(
            f'name = "standin"\n[model]\npath = "model"\nserved_name = "fake-model"\n'
            f'[gpu]\nname = "stand-in"\nmemory_gib = 95.6\n[engine]\nname = "sglang"\nversion = "0.5.13"\n'
            f"command = {json.dumps([os.path.realpath(sys.executable), str(BENCH_ENGINE)])}\n"
            f"args = {json.dumps(SPECULATIVE_ARGS)}\n"
            f"env = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in env_table.items())} }}\n"
            f'[server]\nport = {free_port()}\nready_timeout_s = 15\n[host]\ntarget = "local"\n'
        )
        write_prompts(root / "prompts.jsonl", 300)
        argv = [
            "bench", "standin.toml", "--prompts", "prompts.jsonl", "--job", "out/", "--sample", "48",
            "--max-tokens", "48", "--budget-s", "300", "--warmup-s", "3",
            "--variants", "plain,NEXTN:1,NEXTN:2,NEXTN:3", "--write", "best.toml",
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "src"),
            "SPECPILOT_HOME": str(root / "state"),
            "COLUMNS": "200",
        }
        print("specpilot " + " ".join(argv))
        done = subprocess.run(
            [sys.executable, "-m", "specpilot", *argv], cwd=root, env=env, capture_output=True, text=True
        )
        print(done.stderr + done.stdout, end="")
        # what `plan --job` then projects from the bench's result
        plan = ["plan", "standin.toml", "--job", "out/", "--gpus", "8"]
        print("specpilot " + " ".join(plan))
        done = subprocess.run(
            [sys.executable, "-m", "specpilot", *plan], cwd=root, env=env, capture_output=True, text=True
        )
        print("\n".join(line for line in done.stdout.splitlines() if line.startswith("projected")))


if __name__ == "__main__":
    main()
