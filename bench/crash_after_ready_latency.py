"""Time from an engine's fatal line after ready to specpilot's verdict `crash`.

The vLLM stand-in (tests/fakeengines, scenario vllm_crash_after_ready: the lines of
https://github.com/intel/llm-scaler/issues/154) is started through `launch` until ready;
the serving watcher (what `generate --run` runs) then follows its log, the stand-in is
told to crash, records when it wrote the fatal line, and we take the time the watcher
returned its verdict. Before this watcher the same crash was reported as `hang`, after
the hang timeout (600 s by default).

    PYTHONPATH=src python bench/crash_after_ready_latency.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakeengines.standin import config_env  # noqa: E402

from specpilot.check.resolved import release_of  # noqa: E402
from specpilot.hosts import open_host  # noqa: E402
from specpilot.launch.ops import host_for, run_down  # noqa: E402
from specpilot.launch.serving import watch_serving  # noqa: E402
from specpilot.launch.state import read_state, specpilot_home  # noqa: E402
from specpilot.launch.supervisor import launch_planned  # noqa: E402
from specpilot.spec import load_spec  # noqa: E402

STANDIN = REPO / "tests" / "fakeengines" / "standin.py"
NAME = "bench-crash-after-ready"


async def one(work: Path, port: int) -> tuple[float, str]:
    trigger, mark = work / "crash", work / "mark"
    trigger.unlink(missing_ok=True)
    env = config_env(scenario="vllm_crash_after_ready", trigger_file=str(trigger), mark_file=str(mark))
    spec_path = work / "spec.toml"
    spec_path.write_text(
        f'name = "{NAME}"\n[model]\npath = "{work}"\n[gpu]\nmemory_gib = 95.6\n'
        '[engine]\nname = "vllm"\nversion = "0.26.0"\n'
        f"command = {json.dumps([sys.executable, str(STANDIN)])}\n"
        "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\n"
        f"[server]\nport = {port}\n"
    )
    spec = load_spec(spec_path)
    host = open_host("local")
    try:
        result = await launch_planned(spec, release_of(spec), host, plan=None)
    finally:
        await host.close()
    assert result.phase == "ready", result.error
    state = read_state(NAME)
    watcher_host = host_for(state)
    try:
        watching = asyncio.create_task(watch_serving(watcher_host, state))
        await asyncio.sleep(0.5)
        trigger.touch()
        crash = await watching
        returned_at = time.time()
    finally:
        await watcher_host.close()
        await run_down(NAME, timeout_s=5.0)
    return returned_at - float(mark.read_text()), crash.cause


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--port", type=int, default=30919)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="specpilot-bench-"))
    try:
        runs = [asyncio.run(one(work, opts.port)) for _ in range(opts.repeat)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(Path.home() / ".specpilot" / "runs" / NAME, ignore_errors=True)
        shutil.rmtree(specpilot_home() / "runs" / NAME, ignore_errors=True)
    latencies_s = [latency for latency, _ in runs]
    print(
        f"crash after ready -> verdict: causes {sorted({cause for _, cause in runs})}, "
        f"median {statistics.median(latencies_s):.3f} s, max {max(latencies_s):.3f} s "
        f"over {len(runs)} runs"
    )


if __name__ == "__main__":
    main()
