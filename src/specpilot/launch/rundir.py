"""The run directory on the host: its files, their manifest, shipping and re-verification.

    ${SPECPILOT_HOME:-~/.specpilot}/runs/<name>/   (a local run: beside its state.json)
    <host home>/.specpilot/runs/<name>/            (a run over SSH)
      spec.toml  plan.json  launch.sh  env  manifest.json   (written by `up`, verified)
      pid  engine.log                                       (written at start)
      exit                                                  (the engine's returncode, by its watcher)

The manifest holds the sha256 of every file it lists; `verify_on_host` recomputes
them on the far side just before the start, so a file changed between shipping
and start is caught instead of launched.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from specpilot.errors import JobFailed
from specpilot.hosts.base import Host, HostFacts
from specpilot.taskgroup import each_of

SPEC_FILE = "spec.toml"
PLAN_FILE = "plan.json"
LAUNCH_FILE = "launch.sh"
ENV_FILE = "env"
MANIFEST_FILE = "manifest.json"
PID_FILE = "pid"
LOG_FILE = "engine.log"
#: how the engine ended, as its watcher records it: one file per start (named by the run's
#: token), so the watcher of an earlier start that reaps its engine late (the engine was a zombie
#: when `up` reused the name) writes its own file, never this start's
EXIT_FILE_PREFIX = "exit-"
#: files the manifest covers, with their modes
_MODES = {SPEC_FILE: 0o600, PLAN_FILE: 0o644, LAUNCH_FILE: 0o700, ENV_FILE: 0o600}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_dir_path(home: str, name: str) -> str:
    return f"{home.rstrip('/')}/.specpilot/runs/{name}"


@dataclass
class RunFiles:
    """The bytes of each run file, before shipping."""

    spec_toml: bytes
    plan_json: bytes
    launch_sh: bytes
    env: bytes

    def by_name(self) -> dict[str, bytes]:
        return {
            SPEC_FILE: self.spec_toml,
            PLAN_FILE: self.plan_json,
            LAUNCH_FILE: self.launch_sh,
            ENV_FILE: self.env,
        }


def build_manifest(
    files: RunFiles,
    *,
    name: str,
    engine: str,
    engine_version: str,
    argv_shown: list[str],
    facts: HostFacts | None,
) -> bytes:
    """manifest.json: sha256 and size of each file, engine, the (masked) argv, host facts."""
    manifest: dict[str, object] = {
        "name": name,
        "engine": engine,
        "engine_version": engine_version,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": argv_shown,
        "files": {
            fname: {"sha256": sha256_hex(data), "size_bytes": len(data)}
            for fname, data in files.by_name().items()
        },
        "host": None
        if facts is None
        else {
            "hostname": facts.hostname,
            "python_version": facts.python_version,
            "disk_free_bytes": facts.disk_free_bytes,
            "gpus": [
                {"index": g.index, "name": g.name, "memory_total_mib": g.memory_total_mib} for g in facts.gpus
            ],
            "engine_versions": dict(facts.engine_versions),
        },
    }
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


async def ship(host: Host, remote_dir: str, files: RunFiles, manifest_bytes: bytes) -> None:
    """Put every file (the host verifies each on the far side), manifest last."""

    async def put(fname: str, data: bytes) -> None:
        result = await host.put(f"{remote_dir}/{fname}", data, _MODES[fname])
        if result.sha256 != sha256_hex(data):
            raise JobFailed(f"{fname}: the host stored sha256 {result.sha256}, expected {sha256_hex(data)}")

    # every put ends before the first failure is raised: a write cancelled in its worker
    # thread could leave its temporary file behind
    await each_of([(put(fname, data), f"shipping {fname}") for fname, data in files.by_name().items()])
    await host.put(f"{remote_dir}/{MANIFEST_FILE}", manifest_bytes, 0o644)


async def verify_on_host(host: Host, remote_dir: str, files: RunFiles) -> list[str]:
    """Recompute each file's sha256 on the host (one `sha256sum` run); one line per
    file that differs or is missing."""
    paths = {f"{remote_dir}/{fname}": data for fname, data in files.by_name().items()}
    result = await host.run(["sha256sum", "--", *paths], check=False, timeout_s=60.0)
    actual: dict[str, str] = {}
    for line in result.stdout.decode(errors="replace").splitlines():
        digest, _, path = line.partition("  ")
        actual[path] = digest
    problems = []
    for path, data in paths.items():
        expected = sha256_hex(data)
        if actual.get(path) != expected:
            problems.append(
                f"{path}: sha256 on the host is {actual.get(path, 'missing')}, shipped {expected}"
            )
    return problems
