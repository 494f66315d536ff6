"""A new user's mistakes: each is one line naming the field and the fix, exit 2, no traceback.

Every case runs the real command line in-process (click's runner) and checks
the exit code, that the message names what to change, and that no traceback
leaks; `--debug` brings the traceback back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli

GOOD_SPEC = """
name = "demo"
[model]
path = "{model}"
[gpu]
memory_gib = 80
[engine]
name = "vllm"
version = "0.26.0"
args = ["--max-model-len", "4096"]
"""

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 1000,
    "max_position_embeddings": 8192,
}


@dataclass(frozen=True)
class Case:
    name: str
    #: builds the argv from a workspace folder
    argv: Callable[[Path], list[str]]
    #: words the one-line message must contain
    expect: tuple[str, ...]


def spec_with(tmp: Path, old: str = "", new: str = "") -> str:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(CONFIG))
    text = GOOD_SPEC.format(model=model)
    assert old in text
    path = tmp / "spec.toml"
    path.write_text(text.replace(old, new, 1) if old else text)
    return str(path)


CASES = [
    Case("spec file missing", lambda t: ["plan", str(t / "nope.toml")], ("nope.toml", "no such file")),
    Case(
        "typo in a key",
        lambda t: ["plan", spec_with(t, "memory_gib", "memory_gb")],
        ("[gpu] memory_gb", "did you mean 'memory_gib'"),
    ),
    Case(
        "missing section key",
        lambda t: ["plan", spec_with(t, 'version = "0.26.0"', "")],
        ("[engine] version", "missing"),
    ),
    Case(
        "broken TOML",
        lambda t: ["plan", spec_with(t, "memory_gib = 80", "memory_gib = ")],
        ("not valid TOML",),
    ),
    Case(
        "negative GPU memory",
        lambda t: ["plan", spec_with(t, "memory_gib = 80", "memory_gib = -80")],
        ("[gpu] memory_gib", "greater than 0"),
    ),
    Case(
        "unknown engine",
        lambda t: ["plan", spec_with(t, 'name = "vllm"', 'name = "tgi"')],
        ("[engine] name",),
    ),
    Case(
        "version not a release",
        lambda t: ["plan", spec_with(t, '"0.26.0"', '"latest"')],
        ("[engine] version", "0.5.13"),
    ),
    Case(
        "model path without config.json",
        lambda t: ["plan", spec_with(t, 'path = "', f'path = "{t}/empty')],
        ("[model] path", "config.json"),
    ),
    Case(
        "hub id instead of a path",
        lambda t: ["plan", spec_with(t, f'path = "{t}/model"', 'path = "Qwen/Qwen3-8B"')],
        ("[model] path", "huggingface-cli download"),
    ),
    Case(
        "model given twice",
        lambda t: ["plan", spec_with(t, '["--max-model-len"', '["--model", "/x", "--max-model-len"')],
        ("[engine] args", "[model] path"),
    ),
    Case(
        "flag value of the wrong type",
        lambda t: ["plan", spec_with(t, '"4096"', '"4096", "--max-num-seqs", "many"')],
        ("--max-num-seqs", "integer"),
    ),
    Case(
        "pasted command, no engine",
        lambda t: ["plan", "--gpu-memory-gib", "80", "--", "bash", "launch.sh"],
        ("command", "python -m sglang.launch_server"),
    ),
    Case(
        "pasted command, no model",
        lambda t: [
            "plan",
            "--gpu-memory-gib",
            "80",
            "--",
            "python",
            "-m",
            "sglang.launch_server",
            "--tp",
            "2",
        ],
        ("names no model", "--model-path"),
    ),
    Case(
        "pasted command, no GPU memory",
        lambda t: ["plan", "--", "vllm", "serve", str(t)],
        ("--gpu-memory-gib",),
    ),
    Case("nothing given", lambda t: ["plan"], ("SPEC", "spec file")),
    Case(
        "calibration log missing",
        lambda t: ["plan", spec_with(t), "--from-log", str(t / "none.log")],
        ("--from-log", "cannot read"),
    ),
]


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_wrong_input_is_one_clear_line(case: Case, runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, case.argv(tmp_path))
    output = result.output.strip()
    assert result.exit_code == 2, output
    assert "Traceback" not in output
    error_lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, output
    for word in case.expect:
        assert word in error_lines[0], output


def test_debug_shows_the_traceback(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["--debug", "plan", spec_with(tmp_path, "memory_gib", "memory_gb")])
    assert result.exit_code == 2
    assert "Traceback" in result.output
