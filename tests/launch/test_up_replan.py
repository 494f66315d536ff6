"""`up --replan`: a start that proves the plan wrong is planned again from the engine's numbers.

The engine is a stand-in replaying real SGLang 0.5.17 logs from the H200
(tests/data/startup_logs/sglang-h200/), chosen by the --mem-fraction-static it is started
with: 0.95 replays a start that ran out of memory capturing the prefill CUDA graphs (the
configuration an older plan recommended), 0.93 the start of what the re-plan recommends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.check.resolved import resolve
from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.hosts.memory import MemoryHost
from specpilot.launch import recovery
from specpilot.launch import up as up_loop
from specpilot.launch.ops import run_down
from specpilot.launch.outcome import UpResult
from specpilot.launch.replan import Replan, replan
from specpilot.launch.server_plan import ServerPlan, server_plan
from specpilot.launch.up import (
    NoReplan,
    NoReplanWhy,
    Replanned,
    Settled,
    SettleOptions,
    UpEvent,
    start_until_settled,
)
from specpilot.spec import Spec, load_spec
from tests.fakeengines.standin import CONFIG_ENV, config_env
from tests.launch.conftest import FAKES, free_port

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"
OOM_LOG = H200 / "r17-plain-rec-96.log"
READY_LOG = H200 / "r17-plain-rec2-96.log"
OLD_FLAGS = ["--mem-fraction-static", "0.95", "--max-mamba-cache-size", "200", "--max-running-requests", "40"]
#: what the re-plan of OLD_FLAGS recommends
RECOMMENDED = [
    "--mem-fraction-static",
    "0.93",
    "--max-mamba-cache-size",
    "190",
    "--max-running-requests",
    "38",
]


def _spec(tmp_path: Path, flags: list[str]) -> Path:
    spec = tmp_path / "replan.toml"
    engine_env = config_env(replay={"0.95": str(OOM_LOG), "0.93": str(READY_LOG)})
    spec.write_text(
        "\n".join(
            [
                'name = "replan"',
                "[model]",
                f'path = "{REPO / "gpu" / "models" / "qwen3.6-27b"}"',
                "[gpu]",
                "memory_gib = 95.6",
                "[engine]",
                'name = "sglang"',
                'version = "0.5.17"',
                f"command = {json.dumps([sys.executable, str(FAKES / 'standin.py')])}",
                f"args = {json.dumps(['--context-length', '32768', *flags])}",
                f"env = {{ {CONFIG_ENV} = {json.dumps(engine_env[CONFIG_ENV])} }}",
                "[server]",
                f"port = {free_port()}",
                "ready_timeout_s = 60",
                "[host]",
                'target = "local"',
            ]
        )
        + "\n"
    )
    return spec


@pytest.fixture
def stop_replan() -> Iterator[None]:
    """Whatever the test's outcome, nothing it started keeps running."""
    yield None
    with contextlib.suppress(Exception):
        asyncio.run(run_down("replan", timeout_s=5))


def test_an_oom_start_is_replanned_from_the_engines_numbers_and_started_again(
    tmp_path: Path, run_home: Path, memory_host: MemoryHost, stop_replan: None
) -> None:
    spec = _spec(tmp_path, OLD_FLAGS)
    out = CliRunner().invoke(cli, ["up", str(spec), "--force", "--replan", "1", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["phase"] == "ready"
    [change] = data["replans"]
    assert "--mem-fraction-static 0.95 -> 0.93" in change["changes"]
    assert any(line.startswith("--max-mamba-cache-size 200 -> ") for line in change["changes"])
    # what the engine printed before it died replaced the plan's estimates
    assert any("free memory before loading 94.93 GiB" in reason for reason in change["reasons"])
    assert data["allocations"]["kv_tokens"] == 160933


def test_without_replan_the_failure_stands_and_says_how_to_replan(
    tmp_path: Path, run_home: Path, memory_host: MemoryHost
) -> None:
    spec = _spec(tmp_path, OLD_FLAGS)
    out = CliRunner().invoke(cli, ["up", str(spec), "--force"])
    assert out.exit_code == 1
    assert "oom" in out.output and "--replan 1" in out.output
    assert "prefill CUDA graphs" in out.output  # the signature's fix for this OOM


def test_replan_count_is_bounded(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["up", str(_spec(tmp_path, OLD_FLAGS)), "--replan", "9"])
    assert out.exit_code == 2 and "--replan" in out.output


def test_a_start_that_matched_its_plan_is_not_replanned(tmp_path: Path) -> None:
    """The recommended flags and the log of their own start: re-planning changes nothing."""
    spec = load_spec(_spec(tmp_path, RECOMMENDED))
    assert replan(resolve(spec), READY_LOG.read_text(), None) is None


def test_a_log_cut_before_the_weights_cannot_replan(tmp_path: Path) -> None:
    text = OOM_LOG.read_text()
    head = text[: text.index("Load weight end")]  # the engine died while loading the weights
    with pytest.raises(UserError):
        replan(resolve(load_spec(_spec(tmp_path, OLD_FLAGS))), head, None)


# -- the loop as a library function (`launch.up`): what `up` and the job's server stage run


def _server(spec: Spec) -> ServerPlan:
    """The spec checked and planned as `up` does before its first start."""
    return server_plan(resolve(spec))


def _kinds(events: list[UpEvent]) -> list[str]:
    """The events' class names, a start's phases folded into one `Phase`."""
    names = [type(e).__name__ for e in events]
    return [n for i, n in enumerate(names) if n != "Phase" or names[i - 1] != "Phase"]


def test_the_loop_hands_each_step_to_its_caller_and_returns_the_replans(
    tmp_path: Path, run_home: Path, stop_replan: None
) -> None:
    spec = load_spec(_spec(tmp_path, OLD_FLAGS))
    events: list[UpEvent] = []
    run = asyncio.run(
        start_until_settled(_server(spec), SettleOptions(force=True, max_replans=1), events.append)
    )
    assert run.result.phase == "ready"
    assert _kinds(events) == [
        *("Preflighted", "Starting", "Phase", "Settled", "Replanned"),
        *("Preflighted", "Starting", "Phase", "Settled"),
    ]
    failed, ready = (e.result for e in events if isinstance(e, Settled))
    assert (failed.phase, failed.cause) == ("failed", "oom")
    [change] = run.replans
    [said] = [e for e in events if isinstance(e, Replanned)]
    assert (said.number, said.allowed, said.reason, said.change) == (
        1,
        1,
        "the engine ran out of memory",
        change,
    )
    assert run.spec == change.spec and ready == run.result


class _FakeStarts:
    """`launch` replaced by outcomes handed out in turn; every stop and log read recorded."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, results: list[UpResult], change: Replan | None
    ) -> None:
        self.results = results
        self.calls: list[tuple[str, object]] = []
        monkeypatch.setattr(up_loop, "launch", self.launch)
        monkeypatch.setattr(up_loop, "run_down", self.run_down)
        monkeypatch.setattr(up_loop, "stream_log", self.stream_log)
        monkeypatch.setattr(recovery, "replan", lambda resolved, log, plan: change)

    async def launch(self, server: ServerPlan, host: object, *, progress: object) -> UpResult:
        self.calls.append(("launch", server.started.engine.args))
        return self.results.pop(0)

    async def run_down(self, name: str, *, timeout_s: float) -> dict[str, Any]:
        self.calls.append(("down", name))
        return {}

    async def stream_log(self, name: str, *, follow: bool) -> AsyncIterator[bytes]:
        self.calls.append(("log", name))
        yield b"the log"


OFF_PLAN = UpResult(
    "replan", "ready", "ready", pid=4242,
    plan_diff=[{"key": "kv_tokens", "engine": 90_000, "planned": 100_000, "diff_pct": -10.0, "warn": True}],
)  # fmt: skip
OOM = UpResult("replan", "failed", "oom", pid=4242)


def test_the_jobs_loop_keeps_a_ready_server_that_is_off_its_plan(
    tmp_path: Path, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(_spec(tmp_path, OLD_FLAGS))
    fake = _FakeStarts(monkeypatch, [OFF_PLAN], Replan(spec, (), ("--x 1 -> 2",)))
    events: list[UpEvent] = []
    options = SettleOptions(force=True, max_replans=2, replan_off_plan=False)
    run = asyncio.run(start_until_settled(_server(spec), options, events.append))
    assert run.result is OFF_PLAN and run.replans == ()
    assert [c[0] for c in fake.calls] == ["launch"]
    assert _kinds(events) == ["Preflighted", "Starting", "Settled"]


def test_a_ready_server_off_its_plan_is_stopped_before_its_replan_starts(
    tmp_path: Path, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(_spec(tmp_path, OLD_FLAGS))
    # what the re-plan recommends passes check and plan (a re-planned start is never forced)
    engine = spec.engine.model_copy(update={"args": ["--context-length", "32768", *RECOMMENDED]})
    fake = _FakeStarts(
        monkeypatch, [OFF_PLAN, OOM], Replan(spec.model_copy(update={"engine": engine}), (), ())
    )
    events: list[UpEvent] = []
    run = asyncio.run(
        start_until_settled(_server(spec), SettleOptions(force=True, max_replans=1), events.append)
    )
    assert [c[0] for c in fake.calls] == ["launch", "log", "down", "launch"]
    assert run.result is OOM and len(run.replans) == 1
    # the second start ran out of memory with the one allowed re-plan used
    assert events[-1] == NoReplan("the engine ran out of memory", "limit")


@pytest.mark.parametrize(
    ("max_replans", "change", "why"),
    [(0, None, "off"), (1, None, "same_flags")],
)
def test_a_start_that_calls_for_a_replan_says_why_there_is_none(
    max_replans: int,
    change: Replan | None,
    why: NoReplanWhy,
    tmp_path: Path,
    run_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = load_spec(_spec(tmp_path, OLD_FLAGS))
    fake = _FakeStarts(monkeypatch, [OOM], change)
    events: list[UpEvent] = []
    options = SettleOptions(force=True, max_replans=max_replans)
    run = asyncio.run(start_until_settled(_server(spec), options, events.append))
    assert run.result is OOM and events[-1] == NoReplan("the engine ran out of memory", why)
    assert ("down", "replan") not in fake.calls


def test_a_log_that_cannot_calibrate_is_said_with_its_reason(
    tmp_path: Path, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(_spec(tmp_path, OLD_FLAGS))
    _FakeStarts(monkeypatch, [OOM], None)

    def cannot(*args: object) -> None:
        raise UserError("the log was cut before the weights loaded", field="log")

    monkeypatch.setattr(recovery, "replan", cannot)
    events: list[UpEvent] = []
    asyncio.run(start_until_settled(_server(spec), SettleOptions(force=True, max_replans=1), events.append))
    last = events[-1]
    assert isinstance(last, NoReplan) and last.why == "cannot_calibrate"
    assert last.error is not None and "cut before the weights" in last.error


def test_up_refuses_a_port_taken_before_the_start_as_bad_input(
    tmp_path: Path, run_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = UpResult("replan", "failed", "port_in_use", error="port 1234 is in use by another program")
    _FakeStarts(monkeypatch, [taken], None)
    out = CliRunner().invoke(cli, ["up", str(_spec(tmp_path, OLD_FLAGS)), "--force"])
    assert out.exit_code == 2, out.output
    assert "[server] port" in out.output and "in use by another program" in out.output
    assert "failed" not in out.output  # not shown as a failed start: nothing was started
