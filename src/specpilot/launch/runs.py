"""Every run this controller knows: the state files under `${SPECPILOT_HOME:-~/.specpilot}/runs/`.

Read from the local registry only, so listing is instant and needs no host; a local
run whose process is gone shows as `exited` (as `status` says), a remote one shows
its recorded phase (`specpilot status NAME` asks the host).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from specpilot.hosts import agent
from specpilot.launch.state import STATE_FILE, specpilot_home

LIVE_PHASES = ("starting", "ready")


@dataclass(frozen=True)
class RunSummary:
    name: str
    phase: str
    target: str
    endpoint: str | None
    pid: int | None
    age_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "target": self.target,
            "endpoint": self.endpoint,
            "pid": self.pid,
            "age_s": None if self.age_s is None else round(self.age_s, 1),
        }


def _summary(state: dict[str, Any], now_s: float) -> RunSummary:
    phase = str(state.get("phase", "unknown"))
    target = str(state.get("target", "local"))
    pid = state.get("pid")
    if phase in LIVE_PHASES and target == "local" and (pid is None or not agent.pid_alive(int(pid))):
        phase = "exited"
    started = state.get("started_at")
    return RunSummary(
        name=str(state.get("name")),
        phase=phase,
        target=target,
        endpoint=state.get("endpoint"),
        pid=pid,
        age_s=now_s - float(started) if isinstance(started, int | float) else None,
    )


def list_runs() -> list[RunSummary]:
    """Newest first; a state file that cannot be read is skipped, not fatal."""
    now_s = time.time()
    found = []
    for path in sorted((specpilot_home() / "runs").glob(f"*/{STATE_FILE}")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and state.get("name"):
            found.append(_summary(state, now_s))
    return sorted(found, key=lambda run: run.age_s if run.age_s is not None else float("inf"))
