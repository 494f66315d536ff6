"""Helpers that gpu/run_e2e.sh calls on the H200 machine (and in its --local-rehearsal here).

Subcommands (each prints or writes one JSON object, so the shell only sequences):

* ``tokenizer MODEL_DIR``: a ChatML fast tokenizer whose vocabulary covers every id of the
  model's ``vocab_size``. The byte-level BPE of specpilot.demo.tinymodel (trained on a fixed
  text) is padded with word-like filler tokens, so each id a random-weight model samples
  decodes to text. Built where it runs, with that machine's tokenizers/transformers, so the
  files always match the installed transformers' format.
* ``prompts FILE N [--tag T --words W] [--custom FILE2]``: N chat prompts as ``{"id", "messages"}``
  JSONL: short ones, or ~W words each beginning with T (two clients given different tags share
  no prefix a cache could reuse); ``--custom`` writes the same texts as ``{"prompt"}`` lines,
  the custom dataset `vllm bench serve` reads.
* ``timed [--metrics-url U] [--samples TSV] OUT_JSON -- CMD ...``: runs CMD, records wall time,
  the child's CPU time (user + system, from wait4) and the engine's generated tokens in that
  window (the difference of ``vllm:generation_tokens_total`` on /metrics); CMD's stdout goes to
  OUT_JSON.stdout. With ``--samples``, /metrics is also read every 0.25 s (running requests,
  generated tokens) into TSV, and the server's steady-state window over them is recorded
  (gpu/steady.py: the same measure for every client).
* ``baseline --url U --input F --concurrency N --max-tokens N``: the plain client of
  bench/generate_overhead.py's (a) (``openai.AsyncOpenAI`` + ``asyncio.Semaphore``), with
  max_tokens, measuring its own process CPU and the engine's tokens the same way.
* ``up-latency SPEC OUT_JSON FATAL_REGEX``: ``specpilot up --json --force SPEC`` while a thread
  polls the run's engine.log every 5 ms for the fatal line (bench/detect_latency.py's method):
  seconds from the line landing in the log to ``up`` returning.
* ``scrape URL OUT``: the /metrics lines about generation and speculative decoding.
* ``summarize E2E_DIR OUT_DIR``: results.json and summary.md from the step files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import steady  # gpu/steady.py, beside this file: the steady-state window

SRC = Path(__file__).resolve().parents[1] / "src"
GENERATED_TOKENS = re.compile(r"^vllm:generation_tokens_total(?:\{[^}]*\})?\s+([0-9.eE+]+)", re.M)
RUNNING = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+([0-9.eE+]+)", re.M)
#: how often `timed --samples` reads /metrics: a few per second, against decode steps of ~10-50 ms
SAMPLE_INTERVAL_S = 0.25
METRIC_LINES = re.compile(r"^vllm:(generation_tokens|spec_decode|num_requests|kv_cache_usage)", re.M)
PROMPT_TOPICS = (
    "the sea",
    "prime numbers",
    "a robot painter",
    "GPU memory",
    "autumn leaves",
    "sorting lists",
    "the capital of France",
    "speculative decoding",
)
# Lines of a vLLM startup log that tell memory and capacity (as vLLM 0.26 prints them).
MEMORY_LINES = re.compile(
    r"Model loading took|Available KV cache memory|GPU KV cache size|"
    r"Maximum concurrency|Free memory on device|CUDA graph|"
    r"Memory profiling takes|block size|torch.compile takes"
)


# --- tokenizer --------------------------------------------------------------------------------


def filler_token(index: int) -> str:
    """A word-like byte-level token (Ġ is the space): decodes to ' w' + letters."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return "Ġw" + letters


def build_tokenizer(model_dir: Path) -> dict[str, Any]:
    sys.path.insert(0, str(SRC))
    from tokenizers import Tokenizer  # type: ignore[import-not-found, unused-ignore]
    from transformers import (  # type: ignore[import-not-found, unused-ignore]
        AutoTokenizer,
        PreTrainedTokenizerFast,
    )

    from specpilot.demo import tinymodel  # the same BPE, specials and ChatML template

    config = json.loads((model_dir / "config.json").read_text())
    vocab_size = int(config.get("text_config", config)["vocab_size"])
    scratch = model_dir / ".tokenizer-scratch"
    base = tinymodel.build_tokenizer(scratch)
    data = json.loads(base.backend_tokenizer.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    # Added tokens must sit in the model's vocab at their ids too: otherwise loading re-numbers
    # them after the (now full) vocab.
    for token in data["added_tokens"]:
        vocab.setdefault(token["content"], token["id"])
    used = set(vocab.values())
    taken = set(vocab) | {token["content"] for token in data["added_tokens"]}
    fillers = (t for t in map(filler_token, range(2 * vocab_size)) if t not in taken)
    for token_id in range(vocab_size):
        if token_id not in used:
            vocab[next(fillers)] = token_id
    tokenizer = Tokenizer.from_str(json.dumps(data))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token=tinymodel.IM_END,
        pad_token=tinymodel.END_OF_TEXT,
        unk_token=None,
        model_max_length=int(config.get("text_config", config)["max_position_embeddings"]),
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = tinymodel.CHAT_TEMPLATE
    fast.save_pretrained(str(model_dir))
    for leftover in scratch.iterdir():
        leftover.unlink()
    scratch.rmdir()
    loaded = AutoTokenizer.from_pretrained(str(model_dir))
    text = loaded.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    import transformers  # type: ignore[import-not-found, unused-ignore]

    return {
        "model_dir": str(model_dir),
        "vocab": len(loaded),
        "model_vocab_size": vocab_size,
        "transformers": transformers.__version__,
        "decode_last_id": loaded.decode([vocab_size - 1]),
        "chat_template_ok": text.endswith("<|im_start|>assistant\n"),
    }


# --- prompts, metrics -------------------------------------------------------------------------


def prompt_text(tag: str, index: int, words: int) -> str:
    """Distinct from the first word on (no shared prefix for a radix or prefix cache), ~`words` words."""
    topic = PROMPT_TOPICS[index % len(PROMPT_TOPICS)]
    filler = " ".join(filler_token(index * 7919 + k)[1:] for k in range(words))
    return f"{tag}{index} Continue this text about {topic}: {filler}"


def write_tagged_prompts(path: Path, count: int, tag: str, words: int) -> None:
    with path.open("w") as out:
        for i in range(count):
            text = prompt_text(tag, i, words)
            row = {"id": f"{tag}{i:06d}", "messages": [{"role": "user", "content": text}]}
            out.write(json.dumps(row) + "\n")


def write_custom(source: Path, target: Path) -> None:
    """The prompts of a ``{"id", "messages"}`` file as `vllm bench serve`'s custom dataset."""
    with target.open("w") as out:
        for line in source.read_text().splitlines():
            out.write(json.dumps({"prompt": json.loads(line)["messages"][0]["content"]}) + "\n")


def write_prompts(path: Path, count: int) -> None:
    with path.open("w") as out:
        for i in range(count):
            topic = PROMPT_TOPICS[i % len(PROMPT_TOPICS)]
            out.write(
                json.dumps(
                    {
                        "id": f"p{i:06d}",
                        "messages": [
                            {"role": "user", "content": f"Write a few sentences about {topic} (#{i})."}
                        ],
                    }
                )
                + "\n"
            )


def fetch_metrics(url: str | None) -> str:
    if not url:
        return ""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
            return str(reply.read().decode())
    except OSError:
        return ""


def generated_tokens(metrics_text: str) -> float | None:
    values = [float(v) for v in GENERATED_TOKENS.findall(metrics_text)]
    return sum(values) if values else None


def engine_tokens(before: str, after: str) -> float | None:
    start, end = generated_tokens(before), generated_tokens(after)
    return None if start is None or end is None else end - start


# --- timed command ----------------------------------------------------------------------------


def sample_metrics(url: str, samples: Path, done: threading.Event) -> None:
    """(epoch s, running requests, generated tokens so far) every SAMPLE_INTERVAL_S until `done`."""
    with samples.open("w") as out:
        while not done.wait(SAMPLE_INTERVAL_S):
            text = fetch_metrics(url)
            tokens, running = generated_tokens(text), RUNNING.findall(text)
            if tokens is not None and running:
                out.write(f"{time.time():.3f}\t{sum(int(float(r)) for r in running)}\t{tokens:.0f}\n")
                out.flush()


def read_samples(samples: Path) -> list[tuple[float, int, float]]:
    rows = [line.split("\t") for line in samples.read_text().splitlines() if line]
    return [(float(stamp), int(running), float(tokens)) for stamp, running, tokens in rows]


def timed(out_json: Path, metrics_url: str | None, argv: list[str], samples: Path | None = None) -> int:
    before = fetch_metrics(metrics_url)
    done = threading.Event()
    sampler = None
    if samples is not None and metrics_url:
        sampler = threading.Thread(target=sample_metrics, args=(metrics_url, samples, done))
        sampler.start()
    start, wall = time.time(), time.perf_counter()
    with Path(f"{out_json}.stdout").open("w") as stdout:
        child = subprocess.Popen(argv, stdout=stdout)
        _, status, usage = os.wait4(child.pid, 0)
    wall_s = time.perf_counter() - wall
    end = time.time()
    done.set()
    if sampler is not None:
        sampler.join()
    tokens = engine_tokens(before, fetch_metrics(metrics_url))
    rc = os.waitstatus_to_exitcode(status)
    result: dict[str, Any] = {
        "argv": argv,
        "rc": rc,
        "start": start,
        "end": end,
        "wall_s": round(wall_s, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "engine_output_tokens": tokens,
        "engine_output_tokens_per_s": round(tokens / wall_s, 1) if tokens else None,
    }
    if samples is not None and samples.exists():
        result["steady"] = steady.window(steady.from_samples(read_samples(samples)), start, end)
    out_json.write_text(json.dumps(result) + "\n")
    print(json.dumps(result))
    return rc


# --- baseline client --------------------------------------------------------------------------


def baseline(url: str, input_path: Path, concurrency: int, max_tokens: int) -> dict[str, Any]:
    import openai

    prompts = [json.loads(line) for line in input_path.read_text().splitlines() if line.strip()]
    completion_tokens = 0
    failed = 0

    async def main() -> str:
        nonlocal completion_tokens, failed
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=3, timeout=1800)
        model = (await client.models.list()).data[0].id
        limit = asyncio.Semaphore(concurrency)

        async def one(prompt: dict[str, Any]) -> None:
            nonlocal completion_tokens, failed
            async with limit:
                try:
                    response = await client.chat.completions.create(
                        model=model,
                        messages=prompt["messages"],
                        max_tokens=max_tokens,
                        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
                    )
                except openai.OpenAIError:
                    failed += 1
                    return
            if response.usage is not None:
                completion_tokens += response.usage.completion_tokens

        await asyncio.gather(*(one(p) for p in prompts))
        await client.close()
        return str(model)

    before = fetch_metrics(url)
    wall, cpu = time.perf_counter(), time.process_time()
    model = asyncio.run(main())
    wall_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    tokens = engine_tokens(before, fetch_metrics(url))
    return {
        "driver": "AsyncOpenAI + Semaphore",
        "model": model,
        "rows": len(prompts),
        "failed": failed,
        "concurrency": concurrency,
        "wall_s": round(wall_s, 3),
        "cpu_s": round(cpu_s, 3),
        "inprocess_cpu_ms_per_request": round(cpu_s / len(prompts) * 1e3, 3),
        "completion_tokens": completion_tokens,
        "client_output_tokens_per_s": round(completion_tokens / wall_s, 1),
        "engine_output_tokens": tokens,
        "engine_output_tokens_per_s": round(tokens / wall_s, 1) if tokens else None,
    }


# --- refusal latency --------------------------------------------------------------------------


def up_latency(spec: Path, out_json: Path, fatal_regex: str, run_name: str) -> int:
    log = Path.home() / ".specpilot" / "runs" / run_name / "engine.log"
    fatal = re.compile(fatal_regex.encode(), re.M)
    log.unlink(missing_ok=True)
    seen: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                if fatal.search(log.read_bytes()):
                    seen.append(time.time())
                    return
            except OSError:
                pass
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.time()
    child = subprocess.run(
        [sys.executable, "-m", "specpilot", "up", "--json", "--force", str(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    returned = time.time()
    done.set()
    try:
        up = json.loads(child.stdout)
    except json.JSONDecodeError:
        up = {"stdout": child.stdout[-2000:], "stderr": child.stderr[-2000:]}
    result = {
        "up": up,
        "rc": child.returncode,
        "up_wall_s": round(returned - started, 3),
        "fatal_regex": fatal_regex,
        "fatal_line_to_up_exit_s": round(returned - seen[0], 3) if seen else None,
    }
    out_json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "up"}))
    return 0


# --- summary ----------------------------------------------------------------------------------


def load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def last_json_line(path: Path) -> Any:
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, json.JSONDecodeError):
        return None


def memory_lines(log: Path) -> list[str]:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [line.strip()[:300] for line in text.splitlines() if MEMORY_LINES.search(line)][:20]


def up_digest(up: Any) -> dict[str, Any] | None:
    if not isinstance(up, dict):
        return None
    keys = ("name", "phase", "cause", "pid", "elapsed_s", "allocations", "plan_diff", "fix")
    digest = {k: up.get(k) for k in keys}
    error = up.get("error")
    digest["error_tail"] = error[-1500:] if isinstance(error, str) else error
    return digest


def summarize(e2e: Path, out: Path) -> None:
    results = e2e / "results"
    steps: dict[str, Any] = {}
    for up_file in sorted(results.glob("*.up.json")):
        step = up_file.name.split(".")[0]
        entry = steps.setdefault(step, {})
        entry["up"] = up_digest(load(up_file))
        entry["up_attempts"] = [up_digest(load(p)) for p in sorted(results.glob(f"{step}.up-*.json"))]
        entry["memory_lines"] = memory_lines(e2e / "logs" / f"{step}.engine.log")
    for run_file in sorted(results.glob("*.gen-c*.json")):
        step, _, conc = run_file.name.removesuffix(".json").partition(".gen-c")
        timing = load(run_file) or {}
        summary = last_json_line(Path(f"{run_file}.stdout")) or {}
        rows = int(summary.get("done") or 0) + int(summary.get("failed") or 0)
        # The baseline ran under `timed` too: both CPU figures include interpreter start and imports.
        base_timing = load(results / f"{step}.base-c{conc}.json") or {}
        base = last_json_line(results / f"{step}.base-c{conc}.json.stdout")
        if base is not None:
            base["process_cpu_s"] = base_timing.get("cpu_s")
            base["cpu_ms_per_request"] = (
                round(base_timing["cpu_s"] / base["rows"] * 1e3, 3) if base_timing.get("cpu_s") else None
            )
        steps.setdefault(step, {}).setdefault("generate", []).append(
            {
                "concurrency": int(conc),
                "rows": summary.get("total"),
                "done": summary.get("done"),
                "failed": summary.get("failed"),
                "wall_s": timing.get("wall_s"),
                "cpu_s": timing.get("cpu_s"),
                "cpu_ms_per_request": round(timing["cpu_s"] / rows * 1e3, 3)
                if rows and timing.get("cpu_s")
                else None,
                "completion_tokens": summary.get("completion_tokens"),
                "engine_output_tokens_per_s": timing.get("engine_output_tokens_per_s"),
                "spec_accept_length": summary.get("spec_accept_length"),
                "baseline": base,
            }
        )
    for report_file in sorted(results.glob("*.report.json")):
        steps.setdefault(report_file.name.split(".")[0], {})["report"] = load(report_file)
    for metrics_file in sorted(results.glob("*.metrics.txt")):
        steps.setdefault(metrics_file.name.split(".")[0], {})["metrics"] = (
            metrics_file.read_text().splitlines()[:60]
        )
    for bench_file in sorted(results.glob("saturation.c*.bench.json")):
        steps.setdefault("saturation", {}).setdefault("pairs", []).append(saturation_pair(bench_file))
    refusal = load(results / "refusal.latency.json")
    if refusal:
        steps.setdefault("refusal", {}).update(
            up=up_digest(refusal.get("up")),
            rc=refusal.get("rc"),
            up_wall_s=refusal.get("up_wall_s"),
            fatal_line_to_up_exit_s=refusal.get("fatal_line_to_up_exit_s"),
        )
    tokenizer = load(results / "tokenizer.json")
    done = (e2e / "done.txt").read_text().split() if (e2e / "done.txt").exists() else []
    document = {"steps_done": done, "tokenizer": tokenizer, "steps": steps}
    (out / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    (out / "summary.md").write_text(markdown(document))


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a and b else None


PAIR_KEYS = ("rc", "wall_s", "cpu_s", "engine_output_tokens", "engine_output_tokens_per_s", "steady")


def saturation_pair(bench_file: Path) -> dict[str, Any]:
    """One pair's sides (`vllm bench serve`, `specpilot generate`) and specpilot's ratios to vLLM's."""
    prefix = bench_file.name.removesuffix(".bench.json")
    pair: dict[str, Any] = {"concurrency": int(prefix.removeprefix("saturation.c"))}
    for side in ("bench", "specpilot"):
        timing = load(bench_file.with_name(f"{prefix}.{side}.json")) or {}
        pair[side] = {key: timing.get(key) for key in PAIR_KEYS}
    reported = load(bench_file.with_name(f"{prefix}.bench.result.json")) or {}
    pair["bench"]["reported_output_tokens_per_s"] = reported.get("output_throughput")
    pair["ratio_steady"] = ratio(
        (pair["specpilot"]["steady"] or {}).get("output_tokens_per_s"),
        (pair["bench"]["steady"] or {}).get("output_tokens_per_s"),
    )
    pair["ratio_wall"] = ratio(
        pair["specpilot"]["engine_output_tokens_per_s"], pair["bench"]["engine_output_tokens_per_s"]
    )
    return pair


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def markdown(document: dict[str, Any]) -> str:
    lines = ["# specpilot e2e on vLLM", "", f"steps done: {', '.join(document['steps_done']) or 'none'}", ""]
    for name, step in document["steps"].items():
        lines.append(f"## {name}")
        up = step.get("up")
        if up:
            lines.append(
                f"- up: phase `{up.get('phase')}`, cause `{up.get('cause')}`, "
                f"elapsed {up.get('elapsed_s')} s, allocations `{json.dumps(up.get('allocations'))}`"
            )
        if "fatal_line_to_up_exit_s" in step:
            lines.append(
                f"- fatal line to `up` exit: {step['fatal_line_to_up_exit_s']} s "
                f"(up wall {step.get('up_wall_s')} s)"
            )
            if up and up.get("error_tail"):
                lines += ["", "```", str(up["error_tail"])[-800:], "```"]
        if step.get("generate"):
            header = ["conc", "rows", "specpilot tok/s", "specpilot CPU ms/req", "baseline tok/s"]
            header += ["baseline CPU ms/req", "accept len"]
            rows = []
            for run in sorted(step["generate"], key=lambda r: r["concurrency"]):
                base = run.get("baseline") or {}
                rows.append(
                    [
                        run["concurrency"],
                        f"{run['done']}/{run['rows']}",
                        run["engine_output_tokens_per_s"],
                        run["cpu_ms_per_request"],
                        base.get("engine_output_tokens_per_s", "-"),
                        base.get("cpu_ms_per_request", "-"),
                        run["spec_accept_length"],
                    ]
                )
            lines += md_table(header, rows)
        if step.get("pairs"):
            header = ["conc", "vllm bench steady tok/s", "specpilot steady tok/s", "ratio (steady)"]
            header += ["ratio (wall)", "CPU s bench / specpilot"]
            rows = []
            for pair in sorted(step["pairs"], key=lambda p: p["concurrency"]):
                bench, ours = pair["bench"], pair["specpilot"]
                rows.append(
                    [
                        pair["concurrency"],
                        (bench["steady"] or {}).get("output_tokens_per_s"),
                        (ours["steady"] or {}).get("output_tokens_per_s"),
                        pair["ratio_steady"],
                        pair["ratio_wall"],
                        f"{bench['cpu_s']} / {ours['cpu_s']}",
                    ]
                )
            lines += md_table(header, rows)
        for line in step.get("memory_lines", [])[:8]:
            lines.append(f"    {line}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tokenizer").add_argument("model_dir", type=Path)
    p = sub.add_parser("prompts")
    p.add_argument("path", type=Path)
    p.add_argument("count", type=int)
    p.add_argument("--tag")
    p.add_argument("--words", type=int, default=0)
    p.add_argument("--custom", type=Path)
    p = sub.add_parser("timed")
    p.add_argument("out_json", type=Path)
    p.add_argument("--metrics-url")
    p.add_argument("--samples", type=Path)
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p = sub.add_parser("baseline")
    p.add_argument("--url", required=True)
    p.add_argument("--input", type=Path, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p = sub.add_parser("up-latency")
    p.add_argument("spec", type=Path)
    p.add_argument("out_json", type=Path)
    p.add_argument("fatal_regex")
    p.add_argument("run_name")
    p = sub.add_parser("scrape")
    p.add_argument("url")
    p.add_argument("out", type=Path)
    p = sub.add_parser("summarize")
    p.add_argument("e2e_dir", type=Path)
    p.add_argument("out_dir", type=Path)
    args = parser.parse_args()
    if args.command == "tokenizer":
        print(json.dumps(build_tokenizer(args.model_dir)))
    elif args.command == "prompts":
        if args.tag is None:
            write_prompts(args.path, args.count)
        else:
            write_tagged_prompts(args.path, args.count, args.tag, args.words)
        if args.custom is not None:
            write_custom(args.path, args.custom)
    elif args.command == "timed":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        return timed(args.out_json, args.metrics_url, argv, args.samples)
    elif args.command == "baseline":
        print(json.dumps(baseline(args.url, args.input, args.concurrency, args.max_tokens)))
    elif args.command == "up-latency":
        return up_latency(args.spec, args.out_json, args.fatal_regex, args.run_name)
    elif args.command == "scrape":
        text = fetch_metrics(args.url)
        args.out.write_text(
            "\n".join(m.string[m.start() :].split("\n", 1)[0] for m in METRIC_LINES.finditer(text)) + "\n"
        )
    else:
        summarize(args.e2e_dir, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
