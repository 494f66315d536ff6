"""What a plan rests on: which release's arithmetic, and which real starts verified it.

`MEASURED` is the registry of engine starts the planner was compared with on a real GPU,
one record per engine release, GPU and set of runs, with where the numbers are kept; each
engine's records live beside its release table (`MEASURED` in
`specpilot.engines.sglang.releases` and `specpilot.engines.vllm.releases`). A
plan names its arithmetic (the `SglangRelease` row or `VllmLine` it computed with), the
records inside that arithmetic's release window, and whether the requested release
itself was among them: a plan for a release nobody started is said to be unmeasured.
Append a record there when a new matrix of starts is committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from specpilot.engines.adapter import EngineRelease
from specpilot.engines.measured import MeasuredRelease
from specpilot.engines.registry import ENGINES

#: every engine's measured starts, each kept beside its release table and carried by its adapter
MEASURED: tuple[MeasuredRelease, ...] = tuple(r for engine in ENGINES for r in engine.measured)


@dataclass(frozen=True)
class Provenance:
    """The arithmetic a plan used and the measured starts behind it."""

    arithmetic: str
    measured_starts: tuple[str, ...]
    #: whether the requested release itself was started for real
    release_measured: bool

    def summary(self, engine_name: str, version: str) -> str:
        """In words; `engine_name`: the engine's display name (`Engine.display_name`)."""
        basis = f"arithmetic of {self.arithmetic}"
        if not self.measured_starts:
            return f"{basis}; no measured starts in that window: the plan is unverified on a real GPU"
        starts = "; ".join(self.measured_starts)
        if self.release_measured:
            return f"{basis}; measured: {starts}"
        return f"{basis}; measured: {starts}. {engine_name} {version} itself is unmeasured"

    def to_json(self) -> dict[str, object]:
        return {
            "arithmetic": self.arithmetic,
            "measured_starts": list(self.measured_starts),
            "release_measured": self.release_measured,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Provenance:
        return cls(data["arithmetic"], tuple(data["measured_starts"]), data["release_measured"])


def _same_release(a: Version, b: Version) -> bool:
    """Post releases fix bugs, not memory arithmetic: 0.5.13 is measured by 0.5.13.post1."""
    return a.release == b.release


def provenance(release: EngineRelease, measured: tuple[MeasuredRelease, ...] = MEASURED) -> Provenance:
    """The arithmetic window of the release (its release row) and the measured starts inside it."""
    requested, window = release.version, release.window

    def inside(started: Version) -> bool:
        return window.covers(Version(started.base_version))

    records = [r for r in measured if r.engine == release.name and inside(Version(r.release))]
    return Provenance(
        arithmetic=window.arithmetic,
        measured_starts=tuple(r.describe(release.engine.display_name) for r in records),
        release_measured=any(_same_release(Version(r.release), requested) for r in records),
    )
