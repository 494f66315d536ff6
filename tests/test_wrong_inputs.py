"""A new user's mistakes: each is one line naming the field and the fix, exit 2, no traceback.

Every case runs the real command line in-process (click's runner) and checks
the exit code, that the message names what to change, and that no traceback
leaks; `--debug` brings the traceback back. Click's own usage errors (a value out
of range) print `Error: ...` and count as the one line too.

Hosts and servers are real where a user would meet them: a closed port on
127.0.0.1 for an unreachable host, a socket this test holds for a port in use, and
a local HTTP server that answers HTML for a URL that is not an OpenAI server.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from specpilot.cli import cli
from tests.fakeengines.standin import StandIn
from tests.launch.helpers import ready_state

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
    #: text that must appear nowhere in the output (a secret)
    absent: tuple[str, ...] = ()


def spec_with(tmp: Path, old: str = "", new: str = "") -> str:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(CONFIG))
    text = GOOD_SPEC.format(model=model)
    assert old in text
    path = tmp / "spec.toml"
    path.write_text(text.replace(old, new, 1) if old else text)
    return str(path)


def spec_config(tmp: Path, **changes: object) -> str:
    """The good spec, its model's config.json changed (a None value deletes the key)."""
    path = spec_with(tmp)
    config = {**CONFIG, **changes}
    (tmp / "model" / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return path


def model_dir(tmp: Path) -> str:
    """The folder of the good model (its config.json written)."""
    spec_with(tmp)
    return str(tmp / "model")


def spec_args(tmp: Path, *args: str) -> str:
    """The good spec with more engine flags."""
    return spec_with(tmp, '"4096"', '"4096", ' + ", ".join(json.dumps(a) for a in args))


#: a hybrid (Gated DeltaNet) config that lacks one of the state-size keys
HYBRID_WITHOUT_VALUE_HEADS = {
    "full_attention_interval": 2,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
}
SECRET = "hf_q8Zr4Kp1Lm9Xw2Vn"


def nested_toml(tmp: Path) -> str:
    path = Path(spec_with(tmp))
    path.write_text(path.read_text() + "[extra]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    return str(path)


def finished_job(tmp: Path) -> Path:
    """A generate job that finished (one part), against the module's chat server."""
    argv = with_server(
        generate(tmp, jsonl(tmp, GOOD_ROW, '{"id": "b", "prompt": "2 + 3?"}')), LIVE["chat_url"]
    )
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    return tmp / "out"


def export_over_a_file(tmp: Path) -> list[str]:
    out = finished_job(tmp)
    (tmp / "taken").write_text("")
    return ["export", str(out), "--format", "parquet", "--to", str(tmp / "taken")]


def export_cut_shard(tmp: Path) -> list[str]:
    out = finished_job(tmp)
    shard = out / "data" / "part-00000.jsonl"
    shard.write_bytes(shard.read_bytes()[:20])
    return ["export", str(out), "--format", "parquet"]


def report_damaged_ledger(tmp: Path) -> list[str]:
    out = finished_job(tmp)
    (out / "ledger.sqlite").write_bytes(b"\0" * 4096)
    for extra in ("ledger.sqlite-wal", "ledger.sqlite-shm"):
        (out / extra).unlink(missing_ok=True)
    return ["report", str(out)]


def spec_plus(tmp: Path, extra_toml: str) -> str:
    """The good spec with more sections appended (e.g. a [host] or [server] table)."""
    path = Path(spec_with(tmp))
    path.write_text(path.read_text() + extra_toml)
    return str(path)


def jsonl(tmp: Path, *lines: str) -> str:
    path = tmp / "prompts.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


GOOD_ROW = '{"id": "a", "prompt": "What is 2 + 2?"}'
#: Filled by the module fixtures below: a URL that answers HTML, a port this test holds,
#: a chat server that answers every prompt.
LIVE: dict[str, str] = {}


def generate(tmp: Path, input_path: str, *extra: str) -> list[str]:
    """`generate` against a closed port with --model, so only the input decides the outcome."""
    return ["generate", "--input", input_path, "--output", str(tmp / "out"),
            "--server", "http://127.0.0.1:1", "--model", "m",
            # should a case wrongly pass validation, the job gives up at once instead of waiting
            "--max-attempts", "1", "--give-up-after-s", "1", *extra]  # fmt: skip


def a_file(tmp: Path) -> Path:
    """A regular file: no directory can be made under it, whoever you are (root included)."""
    path = tmp / "a-file"
    path.write_text("")
    return path


def with_output(argv: list[str], output: str) -> list[str]:
    """`argv` of `generate(...)` with another --output value."""
    at = argv.index("--output") + 1
    return [*argv[:at], output, *argv[at + 1 :]]


def with_server(argv: list[str], url: str) -> list[str]:
    at = argv.index("--server") + 1
    return [*argv[:at], url, *argv[at + 1 :]]


def not_parquet(tmp: Path) -> str:
    path = tmp / "prompts.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file")
    return str(path)


def damaged_saved_dataset(tmp: Path) -> str:
    folder = tmp / "saved"
    folder.mkdir()
    (folder / "state.json").write_text('{"_data_files": [{"filename": ')
    return str(folder)


def damaged_ledger(tmp: Path) -> list[str]:
    argv = generate(tmp, jsonl(tmp, GOOD_ROW))
    (tmp / "out").mkdir()
    (tmp / "out" / "ledger.sqlite").write_bytes(b"not a database, but 100 bytes of junk " * 3)
    return argv


def data_dir_is_a_file(tmp: Path) -> list[str]:
    argv = generate(tmp, jsonl(tmp, GOOD_ROW))
    (tmp / "out").mkdir()
    (tmp / "out" / "data").write_text("")
    return argv


def full_disk(tmp: Path) -> list[str]:
    """The first shard is /dev/full: every write to it fails with ENOSPC, as on a full disk."""
    argv = with_server(generate(tmp, jsonl(tmp, GOOD_ROW)), LIVE["chat_url"])
    (tmp / "out" / "data").mkdir(parents=True)
    (tmp / "out" / "data" / "part-00000.jsonl").symlink_to("/dev/full")
    return argv


def corrupt_state(tmp: Path) -> str:
    run_state(tmp, "ready")
    (tmp / "state" / "runs" / "old" / "state.json").write_text('{"name": "old", "pha')
    return "old"


def run_state(tmp: Path, phase: str) -> str:
    """A run named `old` in this test's registry, in the given phase."""
    state = tmp / "state" / "runs" / "old" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps(ready_state("old", phase=phase, endpoint="http://127.0.0.1:1").to_json()))
    return "old"


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
    Case(
        "ssh target with a bad port",
        lambda t: ["up", spec_plus(t, '[host]\ntarget = "ssh://gpu@127.0.0.1:notaport"\n')],
        ("[host] target", "not a number", "ssh://user@host:port"),
    ),
    Case(
        "target with another scheme",
        lambda t: ["up", spec_plus(t, '[host]\ntarget = "http://gpu-node"\n')],
        ("[host] target", "only the ssh:// scheme"),
    ),
    Case(
        "unreachable host (closed port)",
        lambda t: ["up", spec_plus(t, '[host]\ntarget = "ssh://gpu@127.0.0.1:1"\n')],
        ("[host] target", "127.0.0.1", "sshd runs there"),
    ),
    Case(
        "identity file that does not exist",
        lambda t: [
            "up",
            spec_plus(t, f'[host]\ntarget = "ssh://gpu@127.0.0.1:1"\nidentity_file = "{t}/id_none"\n'),
        ],
        ("[host] identity_file", "id_none", "does not exist"),
    ),
    Case(
        "port in use",
        lambda t: ["up", spec_plus(t, f"[server]\nport = {LIVE['held_port']}\n")],
        ("[server] port", "already held by pid", "set another [server] port"),
    ),
    Case(
        "input with a broken JSON line",
        lambda t: generate(t, jsonl(t, GOOD_ROW, '{"id": "b", "prompt": ')),
        ("prompts.jsonl:2", "not valid JSON", "fix or delete that line"),
    ),
    Case(
        "empty input",
        lambda t: generate(t, jsonl(t)),
        ("--input", "has no usable rows", "at least one valid prompt row"),
    ),
    Case(
        "input file missing",
        lambda t: generate(t, str(t / "none.jsonl")),
        ("--input", "does not exist", ".jsonl"),
    ),
    Case(
        "duplicate ids in the input",
        lambda t: generate(t, jsonl(t, GOOD_ROW, GOOD_ROW)),
        ("--input", "repeat an earlier id", "--dedupe"),
    ),
    Case(
        "concurrency 0",
        lambda t: generate(t, jsonl(t, GOOD_ROW), "--concurrency", "0"),
        ("--concurrency", "x>=1"),
    ),
    Case(
        "output dir that cannot be created (a path under a file, fails as root too)",
        lambda t: [*generate(t, jsonl(t, GOOD_ROW))[:4], str(a_file(t) / "out"), *generate(t, "")[5:]],
        ("--output", "cannot create", "a directory you can write to"),
    ),
    Case(
        "server URL that is not an OpenAI server",
        lambda t: [
            "generate",
            "--input",
            jsonl(t, GOOD_ROW),
            "--output",
            str(t / "out"),
            "--server",
            LIVE["html_url"],
        ],
        ("--server", "not an OpenAI-compatible server", "text/html"),
    ),
    Case(
        "no server at all",
        lambda t: ["generate", "--input", jsonl(t, GOOD_ROW), "--output", str(t / "out")],
        ("--server", "--run NAME"),
    ),
    Case(
        "the same server twice",
        lambda t: [*generate(t, jsonl(t, GOOD_ROW)), "--server", "http://127.0.0.1:1/v1"],
        ("--server", "given twice", "list each server once"),
    ),
    Case(
        "--run with an unknown run name",
        lambda t: ["generate", "--input", jsonl(t, GOOD_ROW), "--output", str(t / "out"), "--run", "nope"],
        ("--run", "no run named 'nope'", "specpilot up SPEC"),
    ),
    Case(
        "--run of a stopped run",
        lambda t: [
            "generate",
            "--input",
            jsonl(t, GOOD_ROW),
            "--output",
            str(t / "out"),
            "--run",
            run_state(t, "stopped"),
        ],
        ("--run", "is not ready", "specpilot status old"),
    ),
    Case(
        "empty --output",
        lambda t: with_output(generate(t, jsonl(t, GOOD_ROW)), ""),
        ("--output", "is empty"),
    ),
    Case(
        "--run name that climbs out of the run registry",
        lambda t: [
            "generate",
            "--input",
            jsonl(t, GOOD_ROW),
            "--output",
            str(t / "out"),
            "--run",
            "../../../x",
        ],
        ("--run", "not usable as a directory name"),
    ),
    Case(
        "input line nested thousands deep",
        lambda t: generate(t, jsonl(t, '{"id": "a", "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}")),
        ("prompts.jsonl:1", "not valid JSON"),
    ),
    Case(
        "input that is a device, not a file",
        lambda t: generate(t, "/dev/zero"),
        ("--input", "/dev/zero", "not a regular file", ".jsonl"),
    ),
    Case(
        "input named .parquet that is not Parquet",
        lambda t: generate(t, not_parquet(t)),
        ("--input", "cannot be read as parquet", "pass a .jsonl file"),
    ),
    Case(
        "saved datasets folder with a damaged state.json",
        lambda t: generate(t, damaged_saved_dataset(t)),
        ("--input", "state.json cannot be read", "save_to_disk"),
    ),
    Case(
        "temperature nan",
        lambda t: generate(t, jsonl(t, GOOD_ROW), "--temperature", "nan"),
        ("--temperature", "not a finite number"),
    ),
    Case(
        "give-up-after-s nan",
        lambda t: generate(t, jsonl(t, GOOD_ROW), "--give-up-after-s", "nan"),
        ("--give-up-after-s", "not a finite number"),
    ),
    Case(
        "server port out of range",
        lambda t: with_server(generate(t, jsonl(t, GOOD_ROW)), "http://127.0.0.1:99999"),
        ("--server", "127.0.0.1:99999", "Port out of range", "http://HOST:PORT"),
    ),
    Case(
        "server URL with another scheme",
        lambda t: with_server(generate(t, jsonl(t, GOOD_ROW)), "ftp://gpu-node:30000"),
        ("--server", "scheme 'ftp'", "http://HOST:PORT"),
    ),
    Case(
        "server URL without a host",
        lambda t: with_server(generate(t, jsonl(t, GOOD_ROW)), "http://:30000"),
        ("--server", "names no host"),
    ),
    Case(
        "server URL with a space",
        lambda t: with_server(generate(t, jsonl(t, GOOD_ROW)), "http://gpu node:30000"),
        ("--server", "spaces"),
    ),
    Case(
        "server port that is not a number",
        lambda t: with_server(generate(t, jsonl(t, GOOD_ROW)), "http://gpu-node:http"),
        ("--server", "gpu-node:http", "http://HOST:PORT"),
    ),
    Case(
        "damaged ledger in --output",
        damaged_ledger,
        ("--output", "ledger.sqlite", "is damaged", "new --output folder"),
    ),
    Case(
        "output folder holding a file where data/ belongs",
        data_dir_is_a_file,
        ("--output", "failed", "run the same command again to resume"),
    ),
    Case(
        "disk full while writing results",
        full_disk,
        ("--output", "is full", "free space", "run the same command again to resume"),
    ),
    Case(
        "status of a run whose state.json is corrupt",
        lambda t: ["status", corrupt_state(t)],
        ("NAME", "state.json", "not valid JSON", "specpilot up SPEC"),
    ),
    Case(
        "model config with no layers",
        lambda t: ["plan", spec_config(t, num_hidden_layers=0)],
        ("[model] path", "num_hidden_layers = 0", "1 or more"),
    ),
    Case(
        "model config with a count as text",
        lambda t: ["plan", spec_config(t, vocab_size="many")],
        ("[model] path", "vocab_size = 'many'", "whole number"),
    ),
    Case(
        "model config with an infinite size",
        lambda t: ["plan", spec_config(t, hidden_size=1e400)],
        ("[model] path", "hidden_size = inf"),
    ),
    Case(
        "model config with an unknown torch_dtype",
        lambda t: ["plan", spec_config(t, torch_dtype="bfloat61")],
        ("[model] path", "'bfloat61'", "bfloat16"),
    ),
    Case(
        "model config with an int4 torch_dtype",
        lambda t: ["plan", spec_config(t, torch_dtype="int4")],
        ("[model] path", "'int4'"),
    ),
    Case(
        "hybrid model config without linear_num_value_heads",
        lambda t: ["plan", spec_config(t, **HYBRID_WITHOUT_VALUE_HEADS)],
        ("[model] path", "linear_num_value_heads", "state size"),
    ),
    Case(
        "unknown weights dtype in the spec",
        lambda t: ["plan", spec_with(t, "[model]\n", '[model]\ndtype = "bfloat61"\n')],
        ("[model] dtype", "unknown dtype", "bfloat16"),
    ),
    Case(
        "unknown quantization method",
        lambda t: ["plan", spec_with(t, "[model]\n", '[model]\nquantization = "fp9"\n')],
        ("[model] quantization", "'fp9'", "fp8"),
    ),
    Case(
        "infinite GPU memory",
        lambda t: ["plan", spec_with(t, "memory_gib = 80", "memory_gib = inf")],
        ("[gpu] memory_gib", "finite"),
    ),
    Case(
        "NaN GPU memory",
        lambda t: ["plan", spec_with(t, "memory_gib = 80", "memory_gib = nan")],
        ("[gpu] memory_gib", "finite"),
    ),
    Case(
        "free memory before load above the card's total",
        lambda t: ["plan", spec_with(t, "memory_gib = 80", "memory_gib = 80\nfree_before_load_gib = 95")],
        ("[gpu] free_before_load_gib", "more than memory_gib", "cannot exceed"),
    ),
    Case(
        "TOML nested thousands deep",
        lambda t: ["plan", nested_toml(t)],
        ("not valid TOML", "nested too deeply"),
    ),
    Case(
        "env given as a string holding a secret",
        lambda t: ["check", spec_with(t, "[engine]\n", f'[engine]\nenv = "HF_TOKEN={SECRET}"\n')],
        ("[engine] env", "not shown"),
        absent=(SECRET,),
    ),
    Case(
        "vLLM gpu-memory-utilization above 1",
        lambda t: ["plan", spec_args(t, "--gpu-memory-utilization", "1.5")],
        ("[engine] args", "--gpu-memory-utilization", "'1.5'", "0 < x <= 1"),
    ),
    Case(
        "vLLM max-model-len that is not a number",
        lambda t: ["plan", spec_with(t, '"4096"', '"abc"')],
        ("[engine] args", "--max-model-len", "'abc'", "32K"),
    ),
    Case(
        "tensor-parallel size 0",
        lambda t: ["plan", spec_args(t, "--tensor-parallel-size", "0")],
        ("[engine] args", "--tensor-parallel-size", "x >= 1"),
    ),
    Case(
        "tensor-parallel size -2 (short spelling)",
        lambda t: ["plan", spec_args(t, "-tp", "-2")],
        ("[engine] args", "-tp", "'-2'"),
    ),
    Case(
        "pasted command with a negative tensor-parallel size",
        lambda t: [
            "plan",
            "--gpu-memory-gib",
            "80",
            "--",
            "vllm",
            "serve",
            model_dir(t),
            "-tp",
            "-2",
        ],
        ("[engine] args", "-tp", "'-2'", "x >= 1"),
    ),
    Case(
        "max-num-seqs 0",
        lambda t: ["plan", spec_args(t, "--max-num-seqs", "0")],
        ("[engine] args", "--max-num-seqs", "x >= 1"),
    ),
    Case(
        "check of a release outside the modelled range",
        lambda t: ["check", spec_with(t, '"0.26.0"', '"0.0.1"')],
        ("[engine] version", "0.0.1", "outside the releases specpilot models", "e.g. 0.34.0"),
    ),
    Case(
        "pasted command with an unbalanced quote",
        lambda t: ["check", "--", f"vllm serve /m --api-key '{SECRET}"],
        ("command", "No closing quotation", "close the quote"),
        absent=(SECRET,),
    ),
    Case(
        "export --to an existing file",
        export_over_a_file,
        ("--to", "taken", "a folder"),
    ),
    Case(
        "export of a job whose shard was cut short",
        export_cut_shard,
        ("DIR", "part-00000.jsonl", "cut", "rerun the same `specpilot generate`"),
    ),
    Case(
        "report of a job whose ledger is damaged",
        report_damaged_ledger,
        ("DIR", "ledger", "cannot be read", "restore"),
    ),
    Case(
        "status of an unknown run",
        lambda t: ["status", "nope"],
        ("NAME", "no run named 'nope'", "specpilot up"),
    ),
    Case(
        "logs of an unknown run", lambda t: ["logs", "nope"], ("NAME", "no run named 'nope'", "specpilot up")
    ),
    Case(
        "down of an unknown run", lambda t: ["down", "nope"], ("NAME", "no run named 'nope'", "specpilot up")
    ),
    Case(
        "down with a NaN timeout",
        lambda t: ["down", "nope", "--timeout-s", "nan"],
        ("--timeout-s", "'nan' is not a finite number"),
    ),
    Case(
        "run name that is a path",
        lambda t: ["down", "../etc"],
        ("name", "not usable as a directory name", "letters, digits"),
    ),
    Case(
        "export of a folder that is not a generate output",
        lambda t: ["export", str(t), "--format", "parquet"],
        ("DIR", "no ledger.sqlite", "--output directory"),
    ),
    Case("export without a format", lambda t: ["export", str(t)], ("--format",)),
    Case(
        "report of a missing folder",
        lambda t: ["report", str(t / "gone")],
        ("DIR", "no ledger.sqlite", "--output directory"),
    ),
]

#: Needs `check`: plan runs it first and refuses flags the release does not have.
UNKNOWN_FLAG = Case(
    "engine flag that does not exist for that version",
    lambda t: ["plan", spec_with(t, '"4096"', '"4096", "--mem-fraction-static", "0.9"')],
    ("[engine] args", "--mem-fraction-static"),
)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run directories (HOME) and the run registry (SPECPILOT_HOME) inside the test's folder."""
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path / "state"))


async def _html_page(request: web.Request) -> web.Response:
    """What a web UI or a proxy's landing page answers on every path."""
    return web.Response(body=b"<html><body>Welcome to nginx!</body></html>", content_type="text/html")


@pytest.fixture(scope="module", autouse=True)
def live_endpoints() -> Iterator[None]:
    """An HTML server and a held (listening) port on 127.0.0.1, for the module's cases."""
    with StandIn(routes={"*": _html_page}) as html, StandIn() as chat, socket.socket() as held:
        LIVE["chat_url"] = chat.url
        LIVE["html_url"] = html.url
        held.bind(("127.0.0.1", 0))
        held.listen()
        LIVE["held_port"] = str(held.getsockname()[1])
        yield


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


ALL_CASES = [
    *CASES,
    UNKNOWN_FLAG,
]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in CASES] + [UNKNOWN_FLAG.name])
def test_wrong_input_is_one_clear_line(case: Case, runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, case.argv(tmp_path))
    output = result.output.strip()
    assert result.exit_code == 2, output
    assert "Traceback" not in output
    error_lines = [line for line in output.splitlines() if line.lower().startswith("error:")]
    assert len(error_lines) == 1, output
    for word in case.expect:
        assert word in error_lines[0], output
    for secret in case.absent:
        assert secret not in output


def test_debug_shows_the_traceback(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["--debug", "plan", spec_with(tmp_path, "memory_gib", "memory_gb")])
    assert result.exit_code == 2
    assert "Traceback" in result.output


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("memory_gib", [0.5, 4, 16.9])
def test_a_gpu_too_small_is_does_not_fit_not_a_crash(
    runner: CliRunner, tmp_path: Path, memory_gib: float
) -> None:
    """Qwen3-8B on vLLM below ~17 GiB once raised ZeroDivisionError (no length fits at all)."""
    text = (EXAMPLES / "qwen3-8b-vllm.toml").read_text()
    text = text.replace('path = "models/', f'path = "{EXAMPLES}/models/').replace(
        "memory_gib = 79.19", f"memory_gib = {memory_gib}"
    )
    spec = tmp_path / "small.toml"
    spec.write_text(text)
    result = runner.invoke(cli, ["plan", str(spec)])
    assert result.exit_code == 1, result.output
    assert "does not fit" in result.output and "unexpected" not in result.output


def test_an_unknown_architecture_is_planned_with_a_warning(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["plan", spec_config(tmp_path, architectures=["FooForCausalLM"])])
    assert result.exit_code == 0, result.output
    assert "warning: architecture FooForCausalLM is not one this planner was checked on" in " ".join(
        result.output.split()
    )


@pytest.mark.parametrize("secret", [SECRET, "hf_tab\there"], ids=["plain", "with a TOML escape"])
@pytest.mark.parametrize("extra", [[], ["--fix"], ["--json"], ["--fix", "--json"]], ids=str)
def test_check_never_prints_secret_values(
    runner: CliRunner, tmp_path: Path, secret: str, extra: list[str]
) -> None:
    spec = spec_with(tmp_path, "[engine]\n", f"[engine]\nenv = {{ HF_TOKEN = {json.dumps(secret)} }}\n")
    spec = Path(spec)
    spec.write_text(spec.read_text().replace('"4096"', f'"4096", "--api-key", {json.dumps(secret)}'))
    result = runner.invoke(cli, ["check", *extra, str(spec)])
    assert result.exit_code == 0, result.output
    assert "--api-key" in result.output and "***" in result.output
    assert secret not in result.output and json.dumps(secret)[1:-1] not in result.output
