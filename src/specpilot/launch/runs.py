"""Every run this controller knows: the state files under `${SPECPILOT_HOME:-~/.specpilot}/runs/`.

Read from the local registry only, so listing is instant and needs no host; a local
run whose process is gone shows as `exited` (as `status` says), a remote one shows
its recorded phase (`specpilot status NAME` asks the host).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from specpilot.hosts import agent
from specpilot.launch.state import STATE_FILE, DamagedState, RunState, load_state_file, specpilot_home

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


def _summary(state: RunState, now_s: float) -> RunSummary:
    phase, target = state.phase, state.host.target
    if phase in LIVE_PHASES and target == "local" and not agent.pid_alive(state.pid):
        phase = "exited"
    return RunSummary(
        name=state.name,
        phase=phase,
        target=target,
        endpoint=state.endpoint,
        pid=state.pid,
        age_s=now_s - state.started_at_s,
    )


def list_runs() -> list[RunSummary]:
    """Newest first; a state file that cannot be read is skipped, not fatal."""
    now_s = time.time()
    found = []
    for path in sorted((specpilot_home() / "runs").glob(f"*/{STATE_FILE}")):
        try:
            found.append(_summary(load_state_file(path), now_s))
        except (OSError, DamagedState):
            continue
    return sorted(found, key=lambda run: run.age_s if run.age_s is not None else float("inf"))
