"""Time from an engine's fatal log line being written to `specpilot up` returning.

Each failure scenario of the stand-in engines (tests/fakeengines) is started through
the full `launch` path on the local host; the stand-in records when it wrote the
fatal line, and we take the time `launch` returned (process group already stopped).
The incident's health check was `sleep 60 && grep ...`: 60 s at best.

    PYTHONPATH=src python bench/detect_latency.py [--repeat 3] [--ssh]

With --ssh the engine runs behind a real OpenSSH server on 127.0.0.1 (started here
as a child, like the test fixture), so every host operation is an SSH round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakeengines.scenarios import SCENARIOS  # noqa: E402
from tests.fixtures.sshd import SshdServer, start_sshd, stop_sshd  # noqa: E402

from specpilot.hosts import open_host  # noqa: E402
from specpilot.launch.supervisor import launch  # noqa: E402
from specpilot.spec import load_spec  # noqa: E402

FAKE_ENGINE = REPO / "tests" / "fakeengines" / "fake_engine.py"
BASELINE_S = 60.0  # `sleep 60 && grep` from the incident


def write_spec(work: Path, scenario: str, port: int, host_toml: str) -> Path:
    mark = work / f"{scenario}.mark"
    spec = work / f"{scenario}.toml"
    env = {"SPECPILOT_FAKE_SCENARIO": scenario, "SPECPILOT_FAKE_MARK": str(mark)}
    spec.write_text(
        f'name = "bench-{scenario.replace("_", "-")}"\n'
        f'[model]\npath = "{work}"\n[gpu]\nmemory_gib = 95.6\n'
        f'[engine]\nname = "{SCENARIOS[scenario].engine}"\nversion = '
        f'"{"0.5.13" if SCENARIOS[scenario].engine == "sglang" else "0.26.0"}"\n'
        f"command = {json.dumps([sys.executable, str(FAKE_ENGINE)])}\n"
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
        result = await launch(spec, host, plan_json=None)
    finally:
        await host.close()
    returned_at = time.time()
    fatal_at = float((work / f"{scenario}.mark").read_text())
    return returned_at - fatal_at, result.cause


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--port", type=int, default=30917)
    parser.add_argument("--ssh", action="store_true", help="through a loopback sshd")
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
    print(f"host: {'loopback sshd' if opts.ssh else 'local'}")
    print(
        f"\nall {len(all_s)} starts: median {statistics.median(all_s):.3f} s, "
        f"max {max(all_s):.3f} s from the fatal line to `up` returning "
        f"(target < 1 s; `sleep 60 && grep`: {BASELINE_S:.0f} s, "
        f"{BASELINE_S / statistics.median(all_s):.0f}x slower)"
    )


if __name__ == "__main__":
    main()
