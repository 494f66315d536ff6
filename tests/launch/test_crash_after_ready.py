"""A run that dies after ready (vLLM's "Worker proc ... died unexpectedly", then
"EngineCore encountered a fatal error", after /health answered 200, as published in
https://github.com/intel/llm-scaler/issues/154) is a crash with its cause, not a hang:
for `status`, for a job driving it, and in the run state."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.launch.ops import host_for, run_down, run_status, stream_log
from specpilot.launch.serving import watch_serving
from specpilot.launch.state import read_state
from specpilot.spec import Spec
from tests.launch.conftest import SpecFactory
from tests.launch.helpers import up

DIED = "Worker proc VllmWorker-3 died unexpectedly"


def ready_run(make_spec: SpecFactory, tmp_path: Path, name: str) -> tuple[Spec, Path]:
    """A vLLM stand-in that serves until `trigger` exists, then prints the crash."""
    trigger = tmp_path / f"{name}.crash"
    spec = make_spec(
        "vllm_crash_after_ready", engine="vllm", name=name, standin={"trigger_file": str(trigger)}
    )
    result = up(spec)
    assert (result.phase, result.cause) == ("ready", "ready"), result.error
    return spec, trigger


def test_status_reports_the_crash_after_ready_and_records_it(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    spec, trigger = ready_run(make_spec, tmp_path, "crash-status")
    try:
        before = asyncio.run(run_status(spec.name))
        assert (before.phase, before.serving, before.crash) == ("ready", True, None)
        trigger.touch()
        for _ in range(200):  # a guard while the stand-in prints, not a speed assertion
            after = asyncio.run(run_status(spec.name))
            if after.crash is not None:
                break
            time.sleep(0.05)
        assert after.crash is not None
        assert (after.phase, after.cause, after.crash.signature) == ("failed", "crash", "engine_dead")
        assert DIED in after.crash.line
        assert not after.serving  # the engine process lingers and /health still answers
        state = read_state(spec.name)
        assert (state.phase, state.cause) == ("failed", "crash")
    finally:
        asyncio.run(run_down(spec.name, timeout_s=5.0))


def test_the_watcher_returns_the_crash_with_its_error_block(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    spec, trigger = ready_run(make_spec, tmp_path, "crash-watch")

    async def watch() -> object:
        state = read_state(spec.name)
        host = host_for(state)
        try:
            watching = asyncio.create_task(watch_serving(host, state))
            await asyncio.sleep(0.3)
            assert not watching.done()  # serving: nothing to report
            trigger.touch()
            return await asyncio.wait_for(watching, 30.0)  # a guard, not a speed assertion
        finally:
            await host.close()

    try:
        crash = asyncio.run(watch())
        assert crash.cause == "crash" and crash.signature == "engine_dead"  # type: ignore[attr-defined]
        error = crash.error  # type: ignore[attr-defined]
        assert DIED in error and "EngineCore encountered a fatal error." in error
        assert "GET /health" not in error  # the block starts at the fatal line
    finally:
        asyncio.run(run_down(spec.name, timeout_s=5.0))


def test_generate_stops_with_the_cause_when_its_run_crashes(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    spec, trigger = ready_run(make_spec, tmp_path, "crash-generate")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"q{i}", "prompt": f"question {i}"}) + "\n" for i in range(5))
    )
    trigger.touch()  # the stand-in never answers a request: only the crash can end the job
    try:
        done = CliRunner().invoke(
            cli,
            [
                "generate",
                "--input",
                str(prompts),
                "--output",
                str(tmp_path / "out"),
                "--run",
                spec.name,
                "--json",
            ],
            catch_exceptions=False,
        )
        assert done.exit_code == 1, done.output
        summary = json.loads(done.output.strip().splitlines()[-1])
        assert f"run {spec.name} crashed (crash)" in summary["message"]
        assert DIED in summary["message"]
        # nothing answered; the rows wait for the resume (in flight ones are requeued then)
        assert (summary["done"], summary["failed"], summary["in_flight"] + summary["pending"]) == (0, 0, 5)
        assert read_state(spec.name).phase == "failed"
    finally:
        asyncio.run(run_down(spec.name, timeout_s=5.0))


def test_logs_follow_keeps_following_a_quiet_run(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """`logs -f` outlives quiet spells while the engine runs (it used to end at the first)."""
    spec, trigger = ready_run(make_spec, tmp_path, "crash-logs")

    async def follow() -> bytes:
        async def crash_later() -> None:
            await asyncio.sleep(0.5)  # several quiet spells of 0.1 s pass first
            trigger.touch()

        crashing = asyncio.create_task(crash_later())
        seen = b""
        async for chunk in stream_log(spec.name, follow=True, quiet_exit_s=0.1):
            seen += chunk
            if DIED.encode() in seen:
                break
        await crashing
        return seen

    try:
        seen = asyncio.run(follow())
        assert b"Application startup complete." in seen and DIED.encode() in seen
    finally:
        asyncio.run(run_down(spec.name, timeout_s=5.0))
