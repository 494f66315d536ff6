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
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.launch.ops import run_down
from specpilot.launch.replan import replan
from specpilot.spec import load_spec
from tests.fakeengines.standin import CONFIG_ENV, config_env
from tests.fixtures.memory_host import MemoryHost
from tests.launch.conftest import FAKES, free_port

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "startup_logs" / "sglang-h200"
OOM_LOG = H200 / "r17-plain-rec-96.log"
READY_LOG = H200 / "r17-plain-rec2-96.log"
OLD_FLAGS = ["--mem-fraction-static", "0.95", "--max-mamba-cache-size", "200", "--max-running-requests", "40"]


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
    recommended = [
        "--mem-fraction-static",
        "0.93",
        "--max-mamba-cache-size",
        "190",
        "--max-running-requests",
        "38",
    ]
    spec = load_spec(_spec(tmp_path, recommended))
    assert replan(spec, READY_LOG.read_text(), None) is None


def test_a_log_cut_before_the_weights_cannot_replan(tmp_path: Path) -> None:
    text = OOM_LOG.read_text()
    head = text[: text.index("Load weight end")]  # the engine died while loading the weights
    with pytest.raises(UserError):
        replan(load_spec(_spec(tmp_path, OLD_FLAGS)), head, None)
