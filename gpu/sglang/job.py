"""ON the H200 machine: specpilot's own path on a real SGLang, measured against SGLang's benchmark.

    bash gpu/sglang/run_job.sh CARRY_DIR WHEELS_DIR [--budget-s S] [--steps plain,mtp,bench,edge]

(run_job.sh sources env.sh, installs the wheels specpilot needs, then runs this file.)

Steps, each skipped once done (state in $SPECPILOT_GPU_STASH/job, default /root/stash/job):

* ``model``: a text-only Qwen3.6-27B-shaped config (`Qwen3_5ForCausalLM`: the same layers as
  the multimodal checkpoint, without the vision tower, so SGLang builds a plain tokenizer) and
  a ChatML tokenizer padded to its 248,320 ids (gpu/e2e_tools.py), plus the prompt files.
* ``plain`` / ``mtp``: `specpilot up` at the plan's recommendation for the whole card (no
  speculation / MTP with 3 steps), `specpilot generate` of 2,000 rows and both exports, then
  the saturation pairs: `python -m sglang.bench_serving` and `specpilot generate` on the same
  prompts at the same concurrency and output length, one after the other on the same server.
  Each client is timed as a child process (wall, CPU from wait4); the server's own view is read
  from its log's `Decode batch` lines, stamped as they land, and its token counter on /metrics.
* ``bench``: `specpilot bench` over no speculation and MTP on a sample of the job's prompts, on a
  card of ``$BENCH_CARD_GIB`` (emulated by a blocker; default the whole card); each variant's
  start is cut out of the bench's samples into its own folder.
* ``capture``: the prefill capture and SGLang's 4 GiB gate: no speculation at contexts 2,048,
  4,096 and 16,384 on 79.6 and 95.6 GiB cards, and the Qwen3-8B shape (``DENSE_MODEL``, its own
  padded tokenizer) at its whole context on 47.6 GiB: the plan's recommendation, then one step
  (0.01) above it (``CAPTURE_LADDERS``; ``$CAPTURE_LADDERS`` picks some, in its order).
* ``edge``: for MTP on a 95.6 GiB card, no speculation on a 79.6 GiB card and on the whole
  card: the plan's recommendation (the bench's or the plain step's start where it ran the same
  knobs), the fraction that leaves ``EDGE_MARGIN_GIB`` free at that start's measured low point,
  and one step (0.01) above it; then the recommendation with MTP on a 79.6 GiB card.

* ``jobrun``: `specpilot job` over the 2,000 prompts (no speculation, the plan's knobs on the
  whole card, both exports, random weights at max_tokens 64: every answer cut): the yield guard
  must stop the job on its own after about 200 rows, exit non-zero and stop the engine: its
  exit code, the rows sent and done when it stopped, the guard's message, job.json's yield and
  gpu_hours_wasted_share, and the GPU processes left after it (none).
* ``search``: `specpilot bench` as a search over no speculation and MTP (3 draft tokens), each at
  the plan's maximum running requests, half and a quarter (six points, and the KV-bound cap where
  it lies below), on the whole card, within ``$SEARCH_BUDGET_S`` (default ``SEARCH_BUDGET_S``:
  what bench says it needs with no start recorded, a first start ~200 s, the others warm),
  `--write best.toml`; results.json keeps every point's status, its measured or predicted rate
  and projection, the budget line bench printed, the winner and the ratio of its projected job
  to the other configuration's best point measured at its own cap (`summarize_search`).
* ``upbest``: `specpilot up` of that best.toml as written, `status` (live argv against the spec),
  200 rows through it, down.

Environment for a short lease: ``SKIP_E2E=1`` (no 2,000-row job; ``SKIP_E2E=plain``: only in the
steps named), ``E2E_LIMIT_ROWS=N``,
``SAT_CONCURRENCIES=64,max,16`` and ``MTP_SAT_CONCURRENCIES=`` (which saturation pairs, in order;
empty: none), ``BENCH_CARD_GIB=95.6``, ``BENCH_SAMPLE=160``.

Every start runs under a GPU memory sampler (NVML every 20 ms) and a log stamper, so each
start records its lowest free memory and the log line it followed. Results land under $OUT:
``job.log`` (the console), ``results.json``, ``job-logs.tar.gz`` (engine logs, samples,
stamped lines, client outputs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "gpu"))
sys.path.insert(0, str(REPO / "gpu" / "sglang"))

import e2e_tools  # noqa: E402  (gpu/e2e_tools.py: the padded tokenizer)
import steady  # noqa: E402  (gpu/steady.py: the steady-state window)

STASH = Path(os.environ.get("SPECPILOT_GPU_STASH", "/root/stash")) / "job"
RUNS = Path(os.environ.get("SPECPILOT_HOME", str(Path.home() / ".specpilot"))) / "runs"
PORT = 30000
H200_TOTAL_GIB = 139.8  # the whole card, as torch reports it there


def whole_card() -> tuple[str, float]:
    """The machine's GPU and its memory as torch reports it (139.8 GiB on an H200, ~79.2 on an
    H100): the whole-card specs plan for the card the round runs on."""
    shown = subprocess.run(
        [sys.executable, "-c", "import torch; p = torch.cuda.get_device_properties(0); "
         "print(p.name.replace(' ', '_'), p.total_memory / 2**30)"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    if len(shown) != 2:
        return "H200", H200_TOTAL_GIB
    name = "H100" if "H100" in shown[0] else "H200" if "H200" in shown[0] else shown[0]
    return name, math.floor(float(shown[1]) * 10) / 10


URL = f"http://127.0.0.1:{PORT}"
MODEL_NAME = "qwen3.6-27b-text"
E2E_ROWS = 2000
E2E_LIMIT_ROWS = int(os.environ.get("E2E_LIMIT_ROWS", E2E_ROWS))
E2E_MAX_TOKENS = 64
#: ~470-token prompts: 2,000 of them prefill in about a minute, so the whole job fits one command
E2E_WORDS_PER_PROMPT = 80
SAT_MAX_TOKENS = 256
WORDS_PER_PROMPT = 400
#: the free memory the edge step leaves at the start's measured low point (the margin under test)
EDGE_MARGIN_GIB = 0.5
FRACTION_STEP = 0.01
# What the carry leaves out (gpu/sglang/README.md): FA3, flashinfer's sampler, xgrammar's library,
# the checkpoint. Metrics on so the server's token counter can be read.
BASE_ARGS = [
    "--load-format",
    "dummy",
    "--attention-backend",
    "triton",
    "--sampling-backend",
    "pytorch",
    "--grammar-backend",
    "none",
    "--context-length",
    "8192",
    "--enable-metrics",
    "--decode-log-interval",
    "10",
]
MTP_ARGS = [
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
KEEP_ENV = (
    "PYTHONPATH",
    "PATH",
    "CUDA_HOME",
    "SGLANG_ENABLE_JIT_DEEPGEMM",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "PYTHONUNBUFFERED",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)
#: the search step's budget: two screens (a first start ~200 s compiling kernels, one warm ~70 s,
#: each ~20 s of warm-up and a wave of 64-token answers) and up to five full samples at warm
#: starts (three confirmations, two knee probes: ~90 s each, as the 2026-12-03 round's 276 s for
#: two screens and one confirmation with warm kernels); bench refuses less than its two screens
SEARCH_BUDGET_S = int(os.environ.get("SEARCH_BUDGET_S", "960"))  # $SEARCH_BUDGET_S: a shorter lease
STEP_EST_S = {
    "jobrun": 330,
    "search": SEARCH_BUDGET_S + 60,
    "upbest": 150,
    "model": 40,
    "plain": 330,
    "mtp": 260,
    "bench": 300,
    "edge": 200,
    "capture": 220,
}
#: the capture round (the prefill graph's captured sizes and SGLang's 4 GiB gate): no speculation
#: at contexts 2,048 / 4,096 / 16,384 on two cards, each the plan's recommendation and one step
#: (0.01) above it. $CAPTURE_LADDERS picks some ("c4k-80,c2k-96"); the order is the value's
CAPTURE_LADDERS = {
    "c4k-80": (4096, 79.6),
    "c4k-96": (4096, 95.6),
    "c2k-80": (2048, 79.6),
    "c2k-96": (2048, 95.6),
    "c16k-80": (16384, 79.6),
    "c16k-96": (16384, 95.6),
    # the dense model (DENSE_MODEL) at its whole context on a 47.6 GiB card: the recommendation
    # pins --max-running-requests, whose fp32 logits the plan once counted against itself
    "d8b-48": (40960, 47.6),
}
#: each start of the edge step: up to ready and down again
START_EST_S = 100


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left_s(self) -> float:
        return self.end - time.monotonic()


def say(*parts: object) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def state() -> dict[str, Any]:
    path = STASH / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"done": [], "results": {}}


def save(doc: dict[str, Any]) -> None:
    (STASH / "state.json").write_text(json.dumps(doc, indent=1))


def specpilot(
    *args: str, out: Path | None = None, timeout_s: float = 900
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", "from specpilot.cli import main; main()", *args]
    say("$ specpilot", shlex.join(args))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if out is not None:
        out.write_text(done.stdout)
    say(f"  exit {done.returncode}", done.stderr.strip().splitlines()[-1:] if done.stderr else "")
    return done


# --- the model and the prompts ----------------------------------------------------------------


def model_dir(name: str = MODEL_NAME) -> Path:
    return STASH / "models" / name


#: the dense model of the capture round: gpu/models/qwen3-8b's config with a padded tokenizer
DENSE_MODEL = "qwen3-8b"


def dense_model() -> Path:
    """gpu/models/qwen3-8b with a tokenizer padded to its vocabulary (built once per machine)."""
    folder = model_dir(DENSE_MODEL)
    if not (folder / "tokenizer.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text((REPO / "gpu/models" / DENSE_MODEL / "config.json").read_text())
        e2e_tools.build_tokenizer(folder)
    return folder


def step_model() -> dict[str, Any]:
    folder = model_dir()
    folder.mkdir(parents=True, exist_ok=True)
    full = json.loads((REPO / "gpu/models/qwen3.6-27b/config.json").read_text())
    text = dict(full["text_config"]) | {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text"}
    text.setdefault("tie_word_embeddings", full.get("tie_word_embeddings", False))
    text.setdefault("torch_dtype", full.get("torch_dtype", "bfloat16"))
    (folder / "config.json").write_text(json.dumps(text, indent=2))
    info = e2e_tools.build_tokenizer(folder)
    e2e_tools.write_tagged_prompts(STASH / "e2e.jsonl", E2E_ROWS, "e", E2E_WORDS_PER_PROMPT)
    return info


def sharegpt_copy(source: Path, target: Path) -> None:
    """The same prompts in the custom-dataset shape bench_serving reads (a user and an answer turn)."""
    with target.open("w") as out:
        for line in source.read_text().splitlines():
            row = json.loads(line)
            turns = [
                {"from": "human", "value": row["messages"][0]["content"]},
                {"from": "gpt", "value": "ok ok"},
            ]
            out.write(json.dumps({"conversations": turns}) + "\n")


# --- the start, sampled -----------------------------------------------------------------------


class Sampler:
    """GPU memory used every 20 ms (NVML), and every line of each engine log stamped as it lands.

    `logs()` names the logs to follow (polled, so a log that appears later is followed too);
    each is stamped into its own `lines-<run>.tsv`, or into `lines.tsv` when the folder holds one
    start (`single`: the layout `specpilot plan --samples` reads).
    """

    def __init__(self, folder: Path, logs: Callable[[], list[Path]], single: bool = False) -> None:
        self.folder, self.logs, self.single = folder, logs, single
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._memory, daemon=True)]
        self.followed: set[Path] = set()
        self.watcher = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Sampler:
        self.folder.mkdir(parents=True, exist_ok=True)
        for thread in (*self.threads, self.watcher):
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.watcher.join(timeout=5)
        for thread in self.threads:
            thread.join(timeout=5)

    def _memory(self) -> None:
        import pynvml  # nvidia-ml-py, in the image

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with (self.folder / "memory.tsv").open("w") as out:
            out.write(f"# total_bytes {pynvml.nvmlDeviceGetMemoryInfo(handle).total}\n")
            while not self.stop.is_set():
                info = pynvml.nvmlDeviceGetMemoryInfo(handle)
                out.write(f"{time.time():.3f}\t{info.used}\n")
                self.stop.wait(0.02)

    def _watch(self) -> None:
        while not self.stop.is_set():
            for log in self.logs():
                if log not in self.followed and log.exists():
                    self.followed.add(log)
                    thread = threading.Thread(target=self._lines, args=(log,), daemon=True)
                    self.threads.append(thread)
                    thread.start()
            self.stop.wait(0.02)

    def _lines(self, log: Path) -> None:
        target = self.folder / ("lines.tsv" if self.single else f"lines-{log.parent.name}.tsv")
        with log.open("rb") as source, target.open("w") as out:
            pending = b""
            while True:
                chunk = source.read()
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    stamp = time.time()
                    for line in lines:
                        out.write(f"{stamp:.3f}\t{line.decode(errors='replace')}\n")
                    out.flush()
                elif self.stop.is_set():
                    return
                else:
                    time.sleep(0.01)


def spec_text(name: str, args: list[str], card_gib: float | None, model: Path | None = None) -> str:
    env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ} | {"CUDA_VISIBLE_DEVICES": "0"}
    env_lines = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    card, whole_gib = whole_card()
    memory = f'name = "{card}"\nmemory_gib = {card_gib or whole_gib}'
    release = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return f'''name = "{name}"
[model]
path = "{model or model_dir()}"
[gpu]
{memory}
[engine]
name = "sglang"
version = "{release}"
command = ["{sys.executable}", "{REPO}/gpu/sglang/launch.py"]
args = {json.dumps(args)}
env = {{ {env_lines} }}
[server]
port = {PORT}
ready_timeout_s = 500
[host]
target = "local"
'''


def with_context(context: int) -> list[str]:
    """BASE_ARGS at another --context-length."""
    out = list(BASE_ARGS)
    out[out.index("--context-length") + 1] = str(context)
    return out


def planned_spec(
    name: str,
    extra: list[str],
    card_gib: float | None,
    folder: Path,
    base: list[str] | None = None,
    model: Path | None = None,
) -> tuple[Path, dict[str, Any]]:
    """The spec with the plan's recommended knobs added (what `plan` prints under 'starts first time')."""
    base = BASE_ARGS if base is None else base
    folder.mkdir(parents=True, exist_ok=True)
    draft = folder / f"{name}-as-given.toml"
    draft.write_text(spec_text(name, base + extra, card_gib, model))
    plan = json.loads(specpilot("plan", str(draft), "--json").stdout or "{}")
    recommended = list(plan.get("recommended_args") or [])
    spec = folder / f"{name}.toml"
    spec.write_text(spec_text(name, base + extra + recommended, card_gib, model))
    # the plan of the spec as it will start: its concurrency is the recommendation's
    final = json.loads(specpilot("plan", str(spec), "--json").stdout or "{}")
    final["recommended_args"] = recommended
    (folder / f"{name}.plan.json").write_text(json.dumps(final, indent=1))
    return spec, final


def peak(folder: Path, until: float) -> dict[str, Any]:
    """Lowest free memory over the start (samples up to `until`) and the last log line before it."""
    text = (folder / "memory.tsv").read_text().splitlines()
    if not text:
        return {}
    rows = [
        line.split("\t") for line in text if not line.startswith("#") and float(line.split("\t")[0]) <= until
    ]
    total = int(text[0].split()[-1])
    if not rows:
        return {}
    stamp, used = max(((float(t), int(u)) for t, u in rows), key=lambda r: r[1])
    before = ""
    for lines in sorted(folder.glob("lines*.tsv"))[:1]:
        for line in lines.read_text(errors="replace").split("\n"):
            t, tab, text = line.partition("\t")
            if not tab or not re.fullmatch(r"[0-9.]+", t):
                continue  # a progress bar's carriage-return part of a line
            if float(t) > stamp:
                break
            before = text
    return {
        "total_gib": round(total / 2**30, 3),
        "peak_used_gib": round(used / 2**30, 3),
        "lowest_free_gib": round((total - used) / 2**30, 3),
        "at": stamp,
        "after_line": before[-300:],
    }


@contextmanager
def server(
    name: str, spec: Path, folder: Path, results: dict[str, Any], force: bool = False
) -> Iterator[bool]:
    """Up under the sampler; the sampler runs until down, so clients' decode lines are stamped too."""
    log = RUNS / name / "engine.log"
    specpilot("down", name, timeout_s=120)  # a start an earlier, cut command left running
    log.unlink(missing_ok=True)
    with Sampler(folder / "samples", lambda: [log], single=True):
        t0 = time.monotonic()
        # --force: an edge start is above what the plan recommends, on purpose
        flags = ["--force"] if force else []
        up = specpilot("up", str(spec), "--json", *flags, out=folder / "up.json", timeout_s=600)
        up_end = time.time()
        results["up_s"] = round(time.monotonic() - t0, 1)
        results["up_exit"] = up.returncode
        try:
            results["up"] = json.loads(up.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            results["up"] = up.stdout[-2000:]
        time.sleep(1.0)
        results["start_peak"] = peak(folder / "samples", until=up_end + 1.0)
        say("  start peak:", results["start_peak"])
        try:
            yield up.returncode == 0
        finally:
            specpilot("down", name, timeout_s=120)
            for suffix in ("", ".1"):
                source = RUNS / name / f"engine.log{suffix}"
                if source.exists():
                    (folder / f"engine{suffix}.log").write_bytes(source.read_bytes())


# --- clients ----------------------------------------------------------------------------------


def metric_tokens() -> float | None:
    text = e2e_tools.fetch_metrics(URL)
    values = [
        float(v) for v in re.findall(r"^sglang:generation_tokens_total(?:\{[^}]*\})?\s+(\S+)", text, re.M)
    ]
    return sum(values) if values else None


def timed_client(
    argv: list[str], out: Path, env: dict[str, str] | None = None, limit_s: float = 150
) -> dict[str, Any]:
    before = metric_tokens()
    start_wall, t0 = time.time(), time.perf_counter()
    with out.open("w") as stdout, (out.with_suffix(".err")).open("w") as stderr:
        child = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env)
        killer = threading.Timer(limit_s, child.terminate)  # a client past its limit: SIGTERM, as Ctrl-C
        killer.start()
        _, status, usage = os.wait4(child.pid, 0)
        killer.cancel()
    wall_s = time.perf_counter() - t0
    after = metric_tokens()
    tokens = None if before is None or after is None else after - before
    return {
        "rc": os.waitstatus_to_exitcode(status),
        "wall_s": round(wall_s, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "start": start_wall,
        "end": time.time(),
        "engine_tokens": tokens,
        "engine_tokens_per_s_wall": round(tokens / wall_s, 1) if tokens else None,
    }


def generate_argv(prompts: Path, job: Path, concurrency: int, max_tokens: int, run: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from specpilot.cli import main; main()",
        "generate",
        "--input",
        str(prompts),
        "--output",
        str(job),
        "--run",
        run,
        "--concurrency",
        str(concurrency),
        "--max-tokens",
        str(max_tokens),
        "--no-thinking",
        "--temperature",
        "1.0",
        "--json",
    ]


def saturation_pair(run: str, folder: Path, concurrency: int, prompts_n: int) -> dict[str, Any]:
    tag = f"s{concurrency}"
    # Each client its own prompts, of the same lengths: the same texts twice would reach the second
    # client as radix-cache hits (and, with a mamba model, as one copy of every hit request's state)
    prompts = folder / f"{tag}.jsonl"
    e2e_tools.write_tagged_prompts(prompts, prompts_n, f"{run}-{tag}-sp-", WORDS_PER_PROMPT)
    sharegpt = folder / f"{tag}.sharegpt.jsonl"
    e2e_tools.write_tagged_prompts(
        folder / f"{tag}.bs.jsonl", prompts_n, f"{run}-{tag}-bs-", WORDS_PER_PROMPT
    )
    sharegpt_copy(folder / f"{tag}.bs.jsonl", sharegpt)
    bench_env = dict(os.environ)
    bench_env["PYTHONPATH"] = f"{REPO}/gpu/sglang/bench-stubs:{bench_env.get('PYTHONPATH', '')}"
    engine_argv = [
        sys.executable,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang-oai-chat",
        "--base-url",
        URL,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(sharegpt),
        "--num-prompts",
        str(prompts_n),
        "--sharegpt-output-len",
        str(SAT_MAX_TOKENS),
        "--max-concurrency",
        str(concurrency),
        "--tokenizer",
        str(model_dir()),
        "--temperature",
        "1.0",
        "--disable-tqdm",
        "--output-file",
        str(folder / f"{tag}.bench_serving.jsonl"),
    ]
    # The same output length on both sides: bench_serving sends ignore_eos; specpilot sends
    # max_tokens, and a random-weight model all but never samples one of its 2 stop ids.
    pair: dict[str, Any] = {"concurrency": concurrency, "prompts": prompts_n, "max_tokens": SAT_MAX_TOKENS}
    say(f"  saturation c={concurrency}: bench_serving")
    pair["bench_serving"] = timed_client(engine_argv, folder / f"{tag}.bench_serving.out", bench_env)
    say(f"  saturation c={concurrency}: specpilot generate")
    job = folder / f"{tag}-job"
    pair["specpilot"] = timed_client(
        generate_argv(prompts, job, concurrency, SAT_MAX_TOKENS, run), folder / f"{tag}.specpilot.out"
    )
    for side in ("bench_serving", "specpilot"):
        lines = steady.read_lines(folder / "samples" / "lines.tsv")
        window = steady.window(lines, pair[side]["start"], pair[side]["end"])
        pair[side]["steady"] = window
        pair[side]["decode_rate"] = steady.decode_rate(lines, pair[side]["start"], pair[side]["end"])
    a, b = pair["specpilot"]["steady"], pair["bench_serving"]["steady"]
    if a.get("output_tokens_per_s") and b.get("output_tokens_per_s"):
        pair["ratio_steady"] = round(a["output_tokens_per_s"] / b["output_tokens_per_s"], 4)
    da, db = pair["specpilot"]["decode_rate"], pair["bench_serving"]["decode_rate"]
    if da and db:
        pair["ratio_decode"] = round(da / db, 4)
    wa, wb = pair["specpilot"]["engine_tokens_per_s_wall"], pair["bench_serving"]["engine_tokens_per_s_wall"]
    if wa and wb:
        pair["ratio_wall"] = round(wa / wb, 4)
    say(
        f"  c={concurrency}: specpilot / bench_serving = {pair.get('ratio_steady')} (steady),",
        f"{pair.get('ratio_wall')} (wall)",
    )
    return pair


def e2e(run: str, folder: Path) -> dict[str, Any]:
    job = folder / "e2e-job"
    found: dict[str, Any] = {}
    concurrency = 256
    found["generate"] = timed_client(
        [
            *generate_argv(STASH / "e2e.jsonl", job, concurrency, E2E_MAX_TOKENS, run),
            "--limit",
            str(E2E_LIMIT_ROWS),
        ],
        folder / "e2e.generate.json",
        limit_s=300,
    )
    found["report"] = json.loads(specpilot("report", str(job), "--json").stdout or "null")
    for fmt in ("specforge", "speculators"):
        done = specpilot("export", str(job), "--format", fmt, "--include-flagged", "--json")
        found[f"export_{fmt}"] = {
            "exit": done.returncode,
            "out": done.stdout[-1500:],
            "err": done.stderr[-500:],
        }
        target = job / f"{fmt}.jsonl"
        if target.exists():
            with target.open() as rows:
                (folder / f"e2e.{fmt}.head.jsonl").write_text("".join(next(rows) for _ in range(2)))
            found[f"export_{fmt}"]["rows"] = sum(1 for _ in target.open())
    return found


def server_info() -> dict[str, Any]:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{URL}/get_server_info", timeout=10) as reply:
            info = json.loads(reply.read())
    except OSError as error:
        return {"error": str(error)}
    states = info.get("internal_states") or [{}]
    return {
        "avg_spec_accept_length": states[0].get("avg_spec_accept_length"),
        "max_total_num_tokens": info.get("max_total_num_tokens"),
        "max_running_requests": info.get("max_running_requests"),
    }


def checkpoint(run: str, results: dict[str, Any]) -> None:
    """What a step has so far, under $OUT, so a command cut at its limit still brings it back."""
    doc = state()
    doc["results"][f"{run} (partial)"] = results
    out = Path(os.environ["OUT"])
    (out / "results.json").write_text(json.dumps(doc["results"], indent=1))
    pack(out)


def step_serving(
    run: str, extra: list[str], budget: Budget, concurrencies: list[int | str]
) -> dict[str, Any]:
    folder = STASH / run
    results: dict[str, Any] = {}
    spec, plan = planned_spec(run, extra, None, folder)
    results["plan"] = {
        k: plan.get(k) for k in ("recommended_args", "max_running_requests", "kv_tokens", "fits")
    }
    plan_max = int(plan.get("max_running_requests") or 64)
    with server(run, spec, folder, results) as ready:
        if not ready:
            return results
        checkpoint(run, results)
        skip = os.environ.get("SKIP_E2E", "")
        if skip == "1" or run in skip.split(","):
            results["e2e"] = {"skipped": f"SKIP_E2E={skip}"}
        else:
            results["e2e"] = e2e(run, folder)
        results["server_info_after_e2e"] = server_info()
        checkpoint(run, results)
        results["saturation"] = []
        for c in concurrencies:
            concurrency = plan_max if c == "max" else int(c)
            est_s = 60 + 2 * (3 if concurrency <= 16 else 2) * SAT_MAX_TOKENS / 25
            if budget.left_s() < est_s + 40:
                say(f"  saturation c={concurrency}: skipped, {budget.left_s():.0f} s left")
                results["saturation"].append({"concurrency": concurrency, "skipped": "budget"})
                continue
            waves = 3 if concurrency <= 16 else 2
            pair = saturation_pair(run, folder, concurrency, waves * concurrency)
            results["saturation"].append(pair)
            checkpoint(run, results)
        results["server_info"] = server_info()
    return results


def step_bench(budget: Budget) -> dict[str, Any]:
    """`specpilot bench` over no speculation and MTP (3 draft tokens), as a user runs it, on a
    card of $BENCH_CARD_GIB (emulated by a blocker; default the whole card)."""
    folder = STASH / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    card = float(os.environ["BENCH_CARD_GIB"]) if os.environ.get("BENCH_CARD_GIB") else None
    spec = folder / "bench.toml"  # as the user writes it: bench plans each variant itself
    spec.write_text(spec_text("bench", BASE_ARGS + MTP_ARGS, card))
    prompts = folder / "prompts.jsonl"
    with prompts.open("w") as out:  # prompt lengths from ~30 to ~1,500 words: a long tail to stratify
        for i in range(900):
            words = int(30 * 50 ** ((i * 0.618034) % 1.0))
            text = e2e_tools.prompt_text(f"b{i}-", i, WORDS_PER_PROMPT).split(" ")[: words + 6]
            out.write(json.dumps({"id": f"b{i:05d}", "prompt": " ".join(text)}) + "\n")
    per_variant_s = int(min(240, budget.left_s() / 2 - 15))
    blocker = hold_card(card) if card else None
    try:
        with Sampler(folder / "samples", lambda: sorted(RUNS.glob("bench-bench-*/engine.log"))):
            done = specpilot(
                "bench",
                str(spec),
                "--prompts",
                str(prompts),
                "--job",
                str(folder / "job"),
                "--sample",
                os.environ.get("BENCH_SAMPLE", "160"),
                "--variants",
                "plain,NEXTN:3",
                "--max-tokens",
                "128",
                "--no-thinking",
                "--budget-s",
                str(per_variant_s),
                "--write",
                str(folder / "best.toml"),
                "--json",
                out=folder / "bench.json",
                timeout_s=max(60, budget.left_s() - 15),
            )
    finally:
        if blocker is not None:
            blocker.terminate()
            blocker.wait(timeout=30)
    for log in RUNS.glob("bench-bench-*/engine.log*"):
        (folder / f"{log.parent.name}.{log.name}").write_bytes(log.read_bytes())
    for name in ("bench.svg", "bench.json"):
        source = folder / "job" / name
        if source.exists():
            (folder / f"job-{name}").write_bytes(source.read_bytes())
    for run in split_starts(folder):
        # the spec each variant ran, for `plan --from-log` (bench plans it the same way)
        planned_spec(run, MTP_ARGS if "nextn" in run else [], card, folder / run)
    return {"exit": done.returncode, "stdout": done.stdout[-6000:], "stderr": done.stderr[-3000:]}


def split_starts(folder: Path) -> list[str]:
    """One folder per bench start (`<run>/engine.log`, `samples/{memory,lines}.tsv`): the bench's
    samples cut to each start's own stretch, from 3 s before its first log line to its last."""
    memory = (folder / "samples" / "memory.tsv").read_text().splitlines()
    runs: list[str] = []
    for lines_path in sorted((folder / "samples").glob("lines-*.tsv")):
        run = lines_path.stem.removeprefix("lines-")
        stamps = [
            float(t)
            for t, tab, _ in (r.partition("\t") for r in lines_path.read_text().split("\n"))
            if tab and re.fullmatch(r"[0-9.]+", t)
        ]
        if not stamps or not (folder / f"{run}.engine.log").exists():
            continue
        first, last = stamps[0] - 3.0, stamps[-1]
        target = folder / run / "samples"
        target.mkdir(parents=True, exist_ok=True)
        kept = [r for r in memory[1:] if first <= float(r.split("\t")[0]) <= last]
        (target / "memory.tsv").write_text("\n".join([memory[0], *kept]) + "\n")
        (target / "lines.tsv").write_bytes(lines_path.read_bytes())
        (folder / run / "engine.log").write_bytes((folder / f"{run}.engine.log").read_bytes())
        runs.append(run)
    return runs


# --- the whole job, the search and its winner ---------------------------------------------------


def ledger_rows(job: Path) -> dict[str, int]:
    """Rows the job's ledger holds as sent at least once and as done (read-only; 0 before
    generate made it)."""
    import sqlite3

    path = job / "ledger.sqlite"
    if not path.exists():
        return {"sent": 0, "done": 0}
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
        sent, done = db.execute("SELECT SUM(attempts > 0 OR state = 2), SUM(state = 2) FROM rows").fetchone()
    return {"sent": int(sent or 0), "done": int(done or 0)}


def step_jobrun(budget: Budget) -> dict[str, Any]:
    """`specpilot job` on 2,000 rows (no speculation, the plan's knobs on the whole card): random
    weights at max_tokens 64 cut every answer, so the yield guard must stop the job by itself
    once it has judged its first 200 rows, exit non-zero with the cause and the measured
    lengths, and stop the engine it started. (The engine is no longer SIGKILLed at 700 rows
    done, as this step did before the guard: the job stops long before; the restart on a death
    is tested on stand-ins.)"""
    folder = STASH / "jobrun"
    spec, plan = planned_spec("jobrun", [], None, folder)
    (folder / "job.toml").write_text(
        f"""[job]
server = "{spec.name}"
prompts = "{STASH / "e2e.jsonl"}"
output = "out"
export = ["specforge", "speculators"]
keep_servers = false
max_restarts = 2
concurrency = 256

[job.sampling]
max_tokens = {E2E_MAX_TOKENS}
temperature = 1.0
thinking = false
"""
    )
    job = folder / "out"
    results: dict[str, Any] = {"plan": {k: plan.get(k) for k in ("recommended_args", "max_running_requests")}}
    log = RUNS / "jobrun" / "engine.log"
    with Sampler(folder / "samples", lambda: [log], single=True):
        t0 = time.monotonic()
        done = specpilot(
            "job", str(folder / "job.toml"), "--json", out=folder / "job.json.out",
            timeout_s=max(60, budget.left_s() - 20),
        )  # fmt: skip
    results.update({"exit": done.returncode, "wall_s": round(time.monotonic() - t0, 1)})
    (folder / "job.stderr.txt").write_text(done.stderr)
    results["rows_when_stopped"] = ledger_rows(job)
    ids: list[str] = []
    for part in sorted((job / "data").glob("part-*.jsonl")) + sorted((job / "flagged").glob("part-*.jsonl")):
        ids += [json.loads(line)["id"] for line in part.read_text().splitlines()]
    results["rows"] = {"written": len(ids), "distinct": len(set(ids))}
    record = job / "job.json"
    if record.exists():
        (folder / "job.record.json").write_text(record.read_text())
        data = json.loads(record.read_text())
        results["stages"] = {k: v.get("status") for k, v in data.get("stages", {}).items()}
        results["restarts"] = data.get("restarts")
        guard = data.get("yield_guard") or {}
        results["guard_message"] = guard.get("message")
        results["guard"] = {k: v for k, v in guard.items() if k != "message"}
        results["yield"] = data.get("yield")
        results["gpu_hours_wasted_share"] = data.get("gpu_hours_wasted_share")
        results["gpu_hours_wasted"] = data.get("gpu_hours_wasted")
    stopped = bool(results.get("guard", {}).get("stopped_early"))
    results["stopped_early_by_the_guard"] = stopped and done.returncode != 0
    for suffix in ("", ".1"):
        source = RUNS / "jobrun" / f"engine.log{suffix}"
        if source.exists():
            (folder / f"engine{suffix}.log").write_bytes(source.read_bytes())
    left = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True, text=True
    )
    results["gpu_processes_after"] = left.stdout.split()  # must be []: the job stopped its engine
    return results


def step_search(budget: Budget) -> dict[str, Any]:
    """`specpilot bench` as a search over no speculation and MTP (3 draft tokens), each at the
    plan's maximum running requests, half and a quarter: six points, on the whole card;
    `--write best.toml` for `upbest`."""
    folder = STASH / "search"
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "search.toml"  # as the user writes it: bench plans each point itself
    spec.write_text(spec_text("search", BASE_ARGS + MTP_ARGS, None))
    best = folder / "best.toml"
    best.unlink(missing_ok=True)
    search_s = int(min(SEARCH_BUDGET_S, budget.left_s() - 60))
    with Sampler(folder / "samples", lambda: sorted(RUNS.glob("bench-search-*/engine.log"))):
        done = specpilot(
            "bench", str(spec), "--prompts", str(STASH / "e2e.jsonl"), "--job", str(folder / "job"),
            "--sample", os.environ.get("SEARCH_SAMPLE", "240"), "--variants", "plain,NEXTN:3",
            "--max-tokens", str(E2E_MAX_TOKENS), "--no-thinking", "--warmup-s", "10",
            "--budget-s", str(search_s), "--write", str(best), "--json",
            out=folder / "bench.json.out", timeout_s=search_s + 240,
        )  # fmt: skip
    (folder / "bench.stderr.txt").write_text(done.stderr)
    for log in RUNS.glob("bench-search-*/engine.log*"):
        (folder / f"{log.parent.name}.{log.name}").write_bytes(log.read_bytes())
    for name in ("bench.svg", "bench.json"):
        source = folder / "job" / name
        if source.exists():
            (folder / f"job-{name}").write_bytes(source.read_bytes())
    found: dict[str, Any] = {"exit": done.returncode, "budget_s": search_s, "best_written": best.exists()}
    found["budget_line"] = next(
        (line for line in done.stderr.splitlines() if line.startswith("budget: ")), None
    )
    found["error"] = next((line for line in done.stderr.splitlines() if line.startswith("error: ")), None)
    result = folder / "job" / "bench.json"
    if result.exists():
        found.update(summarize_search(json.loads(result.read_text())))
    return found


def summarize_search(data: dict[str, Any]) -> dict[str, Any]:
    """Every point of a bench.json (its status, measured or predicted rate and projection, the
    preemptions seen), the winner, and the ratio of the winner's projected job to the best point
    of the other configuration measured at its own cap (below 1: the winner finishes first)."""
    rows = data.get("variants") or []
    points = [
        {
            "label": row["label"],
            "status": row.get("search") or row.get("status"),
            "running": row.get("max_running_requests"),
            "measured_tokens_per_s": row.get("output_tokens_per_s"),
            "predicted": (row.get("search") or row.get("status")) == "predicted",
            "projected_s": row.get("projected_s"),
            "preemptions": row.get("preemptions"),
            "reason": row.get("reason"),
        }
        for row in rows
    ]
    winner = data.get("winner")
    search = data.get("search") or {}
    found: dict[str, Any] = {
        "points": points,
        "winner": winner,
        "compared": search.get("compared"),
        "verdict": search.get("verdict"),
        "spent_s": search.get("spent_s"),
    }
    own = [p for p in points if p["status"] in ("screened", "measured") and p["projected_s"]]
    mine = next((p for p in own if p["label"] == winner), None)
    others = [p for p in own if winner and p["label"].split("@")[0] != winner.split("@")[0]]
    if mine is not None and others:
        other = min(others, key=lambda p: p["projected_s"])
        found["winner_vs_other"] = {
            "other": other["label"],
            "winner_projected_s": mine["projected_s"],
            "other_projected_s": other["projected_s"],
            "ratio": round(mine["projected_s"] / other["projected_s"], 3),
        }
    return found


def step_upbest(budget: Budget) -> dict[str, Any]:
    """`specpilot up` of the search's best.toml as written: the winner's knobs, cap included, must
    be what runs (status compares the live argv with the spec); 200 rows through it; down."""
    folder = STASH / "upbest"
    folder.mkdir(parents=True, exist_ok=True)
    best = STASH / "search" / "best.toml"
    if not best.exists():
        return {"skipped": "the search wrote no best.toml"}
    spec = folder / "best.toml"
    spec.write_text(best.read_text())
    name = str(tomllib.loads(spec.read_text())["name"])
    results: dict[str, Any] = {
        "spec": spec.read_text(),
        "winner": state()["results"].get("search", {}).get("winner"),
    }
    with server(name, spec, folder, results) as ready:
        if ready:
            status = specpilot("status", name, "--json", out=folder / "status.json")
            results["status_exit"] = status.returncode
            results["generate"] = timed_client(
                [*generate_argv(STASH / "e2e.jsonl", folder / "gen", 64, 32, name), "--limit", "200"],
                folder / "generate.json",
                limit_s=120,
            )
            results["server_info"] = server_info()
    return results


# --- the edge -----------------------------------------------------------------------------------

SERVER_ARG = re.compile(r"(mem_fraction_static|max_mamba_cache_size|max_running_requests)=([0-9.]+)")
FREE_BEFORE_LOAD = re.compile(r"Load weight begin\. avail mem=([0-9.]+) GB")


def measured_low(spec: Path, folder: Path) -> dict[str, Any]:
    """The start's lowest free memory as the engine counts it, and its free memory before the
    weights: `specpilot plan --from-log --samples`, as a user reads a recorded start."""
    done = specpilot(
        "plan",
        str(spec),
        "--from-log",
        str(folder / "engine.log"),
        "--samples",
        str(folder / "samples"),
        "--json",
    )
    try:
        peak = json.loads(done.stdout).get("startup_peak") or {}
    except ValueError:
        return {"error": done.stderr[-500:]}
    text = (folder / "engine.log").read_text(errors="replace")
    free = FREE_BEFORE_LOAD.search(text)
    offset = peak.get("nvml_minus_engine_gib") or 0.0
    return {
        "ready": peak.get("ready"),
        "phase": peak.get("phase"),
        "lowest_free_nvml_gib": peak.get("lowest_free_gib"),
        "lowest_free_engine_gib": None
        if peak.get("lowest_free_gib") is None
        else round(peak["lowest_free_gib"] - offset, 3),
        "free_before_load_gib": float(free.group(1)) if free else None,
        "server_args": dict(SERVER_ARG.findall(text[: text.find("Load weight begin")])),
    }


def same_start(low: dict[str, Any], args: list[str]) -> bool:
    """A recorded start ran these knobs (the bench's variant at the same plan)."""
    ran = low.get("server_args") or {}
    wanted = {
        "mem_fraction_static": "--mem-fraction-static",
        "max_mamba_cache_size": "--max-mamba-cache-size",
    }
    return bool(low.get("ready")) and all(
        flag in args and float(ran.get(key, "nan")) == float(args[args.index(flag) + 1])
        for key, flag in wanted.items()
    )


def with_fraction(args: list[str], fraction: float) -> list[str]:
    out = list(args)
    out[out.index("--mem-fraction-static") + 1] = f"{fraction:.2f}"
    return out


def edge_start(
    name: str,
    args: list[str],
    card: float | None,
    folder: Path,
    extra: list[str],
    base: list[str] | None = None,
    model: Path | None = None,
) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / f"{name}.toml"
    spec.write_text(spec_text(name, (BASE_ARGS if base is None else base) + extra + args, card, model))
    found: dict[str, Any] = {"args": args}
    with server(name, spec, folder, found, force=True) as ready:
        if ready:
            found["server_info"] = server_info()
    found["low"] = measured_low(spec, folder)
    say(f"  {name}: ready={found['up_exit'] == 0}", found["low"])
    return found


def step_edge(budget: Budget) -> dict[str, Any]:
    """Starts at the measured edge: for each ladder the plan's recommendation (an earlier step's
    start where it ran the same knobs), then the fraction that leaves EDGE_MARGIN_GIB at that
    start's measured low point ("edge") and one step above it ("above"); then MTP's
    recommendation on a 79.6 GiB card, for the fit. Every start sampled."""
    folder = STASH / "edge"
    results: dict[str, Any] = {}
    # m96 and p140 stop at the estimates' highest fraction (0.95); p80 at its margin
    ladders = [("m96", MTP_ARGS, 95.6), ("p80", [], 79.6), ("p140", [], None)]
    for tag, extra, card in ladders:
        spec, plan = planned_spec(f"{tag}-rec", extra, card, folder / tag)
        args = list(plan.get("recommended_args") or [])
        found: dict[str, Any] = {
            "plan": {k: plan.get(k) for k in ("recommended_args", "max_running_requests", "kv_tokens")}
        }
        results[tag] = found
        blocker = hold_card(card) if card else None
        try:
            rec = recorded_rec(tag, spec, args)
            if rec is None:
                if budget.left_s() < START_EST_S + 20:
                    found["rec"] = {"skipped": "budget"}
                    continue
                rec = edge_start(f"{tag}-rec", args, card, folder / tag / "rec", extra)
            found["rec"] = rec
            low = rec.get("low") or {}
            if low.get("lowest_free_engine_gib") is None or not low.get("free_before_load_gib"):
                continue
            fraction = float(args[args.index("--mem-fraction-static") + 1])
            room = (low["lowest_free_engine_gib"] - EDGE_MARGIN_GIB) / low["free_before_load_gib"]
            edge = fraction + max(0, int(room / FRACTION_STEP + 1e-9)) * FRACTION_STEP
            found["edge_fraction"] = round(edge, 2)
            for label, at in (("edge", edge), ("above", edge + FRACTION_STEP)):
                if label == "edge" and abs(at - fraction) < 1e-9:
                    found[label] = {"same_as": "rec"}
                    continue
                if budget.left_s() < START_EST_S + 20:
                    found[label] = {"skipped": "budget"}
                    continue
                found[label] = edge_start(
                    f"{tag}-{label}", with_fraction(args, at), card, folder / tag / label, extra
                )
                checkpoint("edge", results)
        finally:
            if blocker is not None:
                blocker.terminate()
                blocker.wait(timeout=30)
    for tag, extra in (("m80", MTP_ARGS),):
        if budget.left_s() < START_EST_S + 20:
            results[tag] = {"skipped": "budget"}
            continue
        spec, plan = planned_spec(f"{tag}-rec", extra, 79.6, folder / tag)
        blocker = hold_card(79.6)
        try:
            results[tag] = edge_start(
                f"{tag}-rec", list(plan.get("recommended_args") or []), 79.6, folder / tag / "rec", extra
            )
        finally:
            blocker.terminate()
            blocker.wait(timeout=30)
        checkpoint("edge", results)
    return results


def step_capture(budget: Budget) -> dict[str, Any]:
    """The capture round: for each of `CAPTURE_LADDERS` (or $CAPTURE_LADDERS) the plan's
    recommendation, then one fraction step above it; every start sampled. The recommendation
    must start; the step above must fail or land inside the plan's stated margin."""
    folder = STASH / "capture"
    results: dict[str, Any] = {}
    chosen = [t for t in os.environ.get("CAPTURE_LADDERS", ",".join(CAPTURE_LADDERS)).split(",") if t]
    for tag in chosen:
        context, card = CAPTURE_LADDERS[tag]
        base = with_context(context)
        if budget.left_s() < START_EST_S + 20:
            results[tag] = {"skipped": "budget"}
            continue
        model = dense_model() if tag.startswith("d8b") else None
        _, plan = planned_spec(f"{tag}-rec", [], card, folder / tag, base, model)
        args = list(plan.get("recommended_args") or [])
        found: dict[str, Any] = {"context": context, "card_gib": card, "plan": plan.get("recommended_args")}
        results[tag] = found
        if not args:
            continue
        blocker = hold_card(card)
        try:
            found["rec"] = edge_start(f"{tag}-rec", args, card, folder / tag / "rec", [], base, model)
            checkpoint("capture", results)
            fraction = float(args[args.index("--mem-fraction-static") + 1])
            if budget.left_s() < START_EST_S + 20:
                found["above"] = {"skipped": "budget"}
                continue
            above = with_fraction(args, fraction + FRACTION_STEP)
            found["above"] = edge_start(f"{tag}-above", above, card, folder / tag / "above", [], base, model)
            checkpoint("capture", results)
        finally:
            blocker.terminate()
            blocker.wait(timeout=30)
    return results


def recorded_rec(tag: str, spec: Path, args: list[str]) -> dict[str, Any] | None:
    """The recommendation's start as an earlier step recorded it with samples, if it ran these knobs:
    the bench's variant on the same card, or the whole-card plain step."""
    candidates = {"m96": STASH / "bench" / "bench-bench-nextn-3", "p140": STASH / "plain"}
    folder = candidates.get(tag)
    if (
        folder is None
        or not (folder / "engine.log").exists()
        or not (folder / "samples" / "memory.tsv").exists()
    ):
        return None
    low = measured_low(spec, folder)
    if not same_start(low, args):
        say(f"  {tag}: the recorded start ran other knobs", low.get("server_args"))
        return None
    return {"recorded": str(folder.relative_to(STASH)), "low": low}


def bump(args: list[str], flag: str, delta: int) -> list[str]:
    out = list(args)
    if flag in out:
        i = out.index(flag) + 1
        out[i] = str(int(out[i]) + delta)
    return out


def hold_card(card_gib: float) -> subprocess.Popen[bytes]:
    """Hold all but card_gib of the GPU in another process (env.sh's start_blocker, here)."""
    # nvidia-smi's memory.used, as env.sh reads it: NVML's v1 `used` also counts the driver's own
    # reservation, which left the engine 0.5 GiB less than a real card of that size (2026-12-02)
    idle = 2**20 * int(
        subprocess.run(
            ["nvidia-smi", "-i", "0", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[0]
    )
    code = (
        "import sys, time, torch\n"
        f"card, idle = {card_gib} * 2**30, {idle}\n"
        "torch.empty(1, device='cuda')\n"
        "free, total = torch.cuda.mem_get_info()\n"
        "x = torch.empty(int(free - (card - idle)), dtype=torch.uint8, device='cuda')\n"
        "print('BLOCKER_READY', torch.cuda.mem_get_info()[0] / 2**30, flush=True)\n"
        "time.sleep(10**6)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None
    say("  blocker:", child.stdout.readline().decode().strip())
    return child


def pack(out: Path) -> None:
    with tarfile.open(out / "job-logs.tar.gz", "w:gz") as tar:
        for path in sorted(STASH.rglob("*")):
            if (
                path.is_file()
                and path.suffix in {".log", ".tsv", ".json", ".toml", ".out", ".err", ".svg", ".1"}
                and "models" not in path.parts
            ):
                if path.stat().st_size < 40 * 2**20:
                    tar.add(path, arcname=str(path.relative_to(STASH)))
            elif path.is_file() and path.name.endswith(".head.jsonl"):
                tar.add(path, arcname=str(path.relative_to(STASH)))


def concurrencies(variable: str, default: list[int | str]) -> list[int | str]:
    """$SAT_CONCURRENCIES / $MTP_SAT_CONCURRENCIES ("64,max,16"; empty: none) or the step's own
    list: a short device lease runs fewer pairs."""
    given = os.environ.get(variable)
    if given is None:
        return default
    return [c if c == "max" else int(c) for c in given.split(",") if c]


#: a step's start once an earlier step has compiled the kernels on this machine (~70 s warm)
WARM_STEP_EST_S = {"jobrun": 140, "upbest": 110}


def step_estimate_s(step: str) -> int:
    """The step's expected seconds: less where an engine already started on this machine."""
    warm = any(RUNS.glob("*/engine.log"))
    return WARM_STEP_EST_S.get(step, STEP_EST_S[step]) if warm else STEP_EST_S[step]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--steps", default="model,plain,mtp,bench,edge")
    args = parser.parse_args()
    out = Path(os.environ["OUT"])
    STASH.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget_s)
    doc = state()
    for step in args.steps.split(","):
        if step in doc["done"]:
            continue
        need_s = step_estimate_s(step)
        if budget.left_s() < need_s:
            say(f"{step}: not yet run ({budget.left_s():.0f} s left, needs ~{need_s} s)")
            break
        say(f"== {step}")
        t0 = time.monotonic()
        if step == "model":
            result: dict[str, Any] = step_model()
        elif step == "plain":
            pairs = concurrencies("SAT_CONCURRENCIES", [64, "max", 16])
            result = step_serving("plain", [], budget, pairs)
        elif step == "mtp":
            pairs = concurrencies("MTP_SAT_CONCURRENCIES", ["max", 16])
            result = step_serving("mtp", MTP_ARGS, budget, pairs)
        elif step == "bench":
            result = step_bench(budget)
        elif step == "capture":
            result = step_capture(budget)
        elif step == "jobrun":
            result = step_jobrun(budget)
        elif step == "search":
            result = step_search(budget)
        elif step == "upbest":
            result = step_upbest(budget)
        else:
            result = step_edge(budget)
        result["step_s"] = round(time.monotonic() - t0, 1)
        doc["results"][step] = result
        doc["done"].append(step)
        save(doc)
        (out / "results.json").write_text(json.dumps(doc["results"], indent=1))
        pack(out)
    (out / "results.json").write_text(json.dumps(doc["results"], indent=1))
    pack(out)
    say("done:", doc["done"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
