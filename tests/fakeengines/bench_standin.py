"""Write the README's `specpilot bench` example inputs: `standin.toml` and `prompts.jsonl`.

    python tests/fakeengines/bench_standin.py [FOLDER]     # default: the current folder

`standin.toml` is a spec whose engine is the stand-in (standin.py, beside this file) answering
as a batch loop: SGLang 0.5.13's startup lines and API on a CPU, its speed and acceptance set
per number of draft tokens by `PROFILES` (more draft tokens accept more but run fewer requests at
once, so the fastest variant is neither extreme). The model is the Qwen3.6-27B config under
examples/models/, so `plan` sizes each variant as for the real model. `prompts.jsonl` holds
300 prompts of very different lengths. Paths in the spec are absolute: the engine starts in
its run directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = ROOT / "examples" / "models" / "qwen3.6-27b"

sys.path.insert(0, str(HERE))
from standin import config_env  # noqa: E402  (run as a script from any folder)

#: per draft tokens (0: no speculation): seconds per step, tokens accepted per step, requests run at once
PROFILES = {
    "0": {"step_s": 0.03, "accept": 1.0, "cap": 14},
    "1": {"step_s": 0.03, "accept": 1.9, "cap": 12},
    "2": {"step_s": 0.03, "accept": 2.7, "cap": 11},
    "3": {"step_s": 0.035, "accept": 3.2, "cap": 6},
}
PROMPT_ROWS = 300


def spec_text(port: int = 30123) -> str:
    env = {"SGLANG_ENABLE_SPEC_V2": "1", **config_env(answers="batch", profiles=PROFILES)}
    args = [
        "--context-length", "32768", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--mamba-scheduler-strategy", "extra_buffer",
    ]  # fmt: skip
    return f"""# The stand-in (tests/fakeengines/standin.py): a CPU process that speaks SGLang.
name = "standin"

[model]
path = {json.dumps(str(MODEL))}
served_name = "fake-model"

[gpu]
name = "stand-in"
memory_gib = 95.6

[engine]
name = "sglang"
version = "0.5.13"
command = {json.dumps([sys.executable, str(HERE / "standin.py")])}
args = {json.dumps(args)}
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}

[server]
port = {port}
ready_timeout_s = 15
"""


def write_prompts(path: Path, rows: int = PROMPT_ROWS) -> None:
    """Prompts of very different lengths (a long tail), ids q0..q{rows-1}."""
    with path.open("w") as handle:
        for i in range(rows):
            words = 1 + (i * 37) % 200 + (2000 if i % 50 == 7 else 0)
            handle.write(json.dumps({"id": f"q{i}", "prompt": "word " * words}) + "\n")


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "standin.toml").write_text(spec_text())
    write_prompts(folder / "prompts.jsonl")
    print(f"wrote {folder / 'standin.toml'} and {folder / 'prompts.jsonl'} ({PROMPT_ROWS} prompts)")


if __name__ == "__main__":
    main()
