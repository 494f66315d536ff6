"""Bad input to `plan` and `check`: a release outside the supported range, a `--from-log` log
of another engine, release, model or TP size, or one cut before weight loading. Each is one
line naming the field and what to pass instead, exit 2 (the real command line, in-process)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "data" / "startup_logs"
MODELS = REPO / "examples" / "models"

SGLANG_LOADED = (
    "Load weight begin. avail mem=94.00 GB\n"
    "Load weight end. elapsed=1.00 s, type=Qwen3_5ForConditionalGeneration, avail mem=44.00 GB, "
    "mem usage=50.00 GB.\n"
)
#: Qwen3.6-27B's K cache: 16 attention layers x 4 KV heads x 256 x 2 bytes = 32,768 bytes a token
SGLANG_KV = (
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 100000, K size: {k_gib} GB, V size: {k_gib} GB\n"
)


def spec(tmp: Path, engine: str, version: str, model: str, *args: str) -> str:
    path = tmp / f"{engine}-{version}.toml"
    path.write_text(
        f'name = "case"\n[model]\npath = "{MODELS / model}"\n[gpu]\nmemory_gib = 139.8\n'
        f'[engine]\nname = "{engine}"\nversion = "{version}"\nargs = {list(args)!r}\n'.replace("'", '"')
    )
    return str(path)


def sglang(tmp: Path, version: str = "0.5.13") -> str:
    return spec(tmp, "sglang", version, "qwen3.6-27b", "--mem-fraction-static", "0.8")


def vllm(tmp: Path, version: str = "0.26.0") -> str:
    return spec(tmp, "vllm", version, "qwen3-8b", "--max-model-len", "8192")


def log(tmp: Path, text: str) -> str:
    path = tmp / "engine.log"
    path.write_text(text)
    return str(path)


def head(path: Path, lines: int) -> str:
    return "".join(path.read_text().splitlines(keepends=True)[:lines])


@dataclass(frozen=True)
class Case:
    name: str
    argv: Callable[[Path], list[str]]
    #: words the one error line must contain (the field, what is wrong, what to pass)
    expect: tuple[str, ...]


CASES = (
    Case(
        "plan: SGLang release below the range",
        lambda t: ["plan", sglang(t, "0.4.9")],
        ("[engine] version", "0.4.9 is outside", "e.g. 0.5.23"),
    ),
    Case(
        "plan: vLLM release above the range",
        lambda t: ["plan", vllm(t, "0.40.0")],
        ("[engine] version", "0.40.0 is outside", "e.g. 0.34.0"),
    ),
    Case(
        "check: SGLang release of the next minor",
        lambda t: ["check", sglang(t, "0.6.0")],
        ("[engine] version", "0.6.0 is outside", "e.g. 0.5.23"),
    ),
    Case(
        "from-log: a vLLM log for an SGLang spec",
        lambda t: ["plan", sglang(t), "--from-log", str(LOGS / "vllm" / "h200-dense-96.log")],
        ("--from-log", "a vLLM log", "SGLang 0.5.13 start"),
    ),
    Case(
        "from-log: an SGLang log for a vLLM spec",
        lambda t: ["plan", vllm(t), "--from-log", log(t, SGLANG_LOADED)],
        ("--from-log", "a SGLang log", "vLLM 0.26.0 start"),
    ),
    Case(
        "from-log: another vLLM release",
        lambda t: ["plan", vllm(t, "0.32.0"), "--from-log", str(LOGS / "vllm" / "h200-dense-96.log")],
        ("--from-log", "vLLM 0.26.0", '[engine] version = "0.26.0"'),
    ),
    Case(
        "from-log: another SGLang release",
        lambda t: ["plan", sglang(t), "--from-log", log(t, "sglang version 0.5.17\n" + SGLANG_LOADED)],
        ("--from-log", "SGLang 0.5.17", '[engine] version = "0.5.17"'),
    ),
    Case(
        "from-log: another model's architecture",
        lambda t: [
            "plan",
            vllm(t),
            "--from-log",
            log(t, "version 0.26.0\nResolved architecture: LlamaForCausalLM\nModel loading took 15.27 GiB\n"),
        ],
        ("--from-log", "LlamaForCausalLM", "Qwen3ForCausalLM", "[model] path"),
    ),
    Case(
        "from-log: another model's KV footprint (vLLM, hybrid log for a dense spec)",
        lambda t: ["plan", vllm(t), "--from-log", str(LOGS / "vllm" / "h200-hybrid-96.log")],
        ("--from-log", "another model", "36 attention layers x 8 KV heads x 128, hidden size 4096"),
    ),
    Case(
        "from-log: another model's K cache (SGLang, twice the layers)",
        lambda t: ["plan", sglang(t), "--from-log", log(t, SGLANG_LOADED + SGLANG_KV.format(k_gib="6.10"))],
        ("--from-log", "another model", "16 attention layers x 4 KV heads x 256", "[model] path"),
    ),
    Case(
        "from-log: another tensor parallel size",
        lambda t: [
            "plan",
            sglang(t),
            "--from-log",
            log(t, "server_args=ServerArgs(model_path='m', tp_size=2)\n" + SGLANG_LOADED),
        ],
        ("--from-log", "tensor parallel size 2", "with 1"),
    ),
    Case(
        "from-log: SGLang log cut before weight loading finished",
        lambda t: ["plan", sglang(t), "--from-log", log(t, "Load weight begin. avail mem=94.00 GB\n")],
        ("--from-log", "before weight loading finished", "Load weight end."),
    ),
    Case(
        "from-log: vLLM log cut before weight loading finished",
        lambda t: ["plan", vllm(t), "--from-log", log(t, head(LOGS / "vllm" / "h200-dense-96.log", 5))],
        ("--from-log", "before weight loading finished", "Model loading took"),
    ),
)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_naming_field_and_fix(case: Case, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, case.argv(tmp_path))
    output = result.output.strip()
    assert result.exit_code == 2, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    for word in case.expect:
        assert word in errors[0], output


def test_a_text_only_class_of_the_same_model_is_the_same_model(tmp_path: Path) -> None:
    """SGLang may load a wrapper's language model class (Qwen3_5ForCausalLM for a Qwen3.5 VL)."""
    text = SGLANG_LOADED.replace("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
    result = CliRunner().invoke(cli, ["plan", sglang(tmp_path), "--from-log", log(tmp_path, text), "--json"])
    assert result.exit_code in (0, 1), result.output


@pytest.mark.parametrize(
    ("engine", "text", "weights_gib"),
    [
        ("sglang", "sglang version 0.5.13.post1\n" + SGLANG_LOADED + SGLANG_KV.format(k_gib="3.05"), 50.0),
        ("vllm", (LOGS / "vllm" / "h200-dense-96.log").read_text(), 15.27),
    ],
)
def test_a_log_of_the_same_model_and_release_calibrates(
    engine: str, text: str, weights_gib: float, tmp_path: Path
) -> None:
    """The near misses: the footprint and release checks pass a log of the spec's own server."""
    spec_path = sglang(tmp_path) if engine == "sglang" else vllm(tmp_path)
    result = CliRunner().invoke(cli, ["plan", spec_path, "--from-log", log(tmp_path, text), "--json"])
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.output)["measured"]["weights_gib"] == weights_gib


@pytest.mark.parametrize("count", ["0", "-2"])
def test_gpu_count_below_one_is_refused(count: str) -> None:
    """`plan --gpu-count 0` was once accepted (0 read as "not given")."""
    argv = ["plan", "--gpu-count", count, "--gpu-memory-gib", "139.8", "--",
            "python3", "-m", "sglang.launch_server", "--model-path", str(MODELS / "qwen3-8b")]  # fmt: skip
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2
    assert "--gpu-count" in result.output and f"{count} is not in the range x>=1" in result.output
