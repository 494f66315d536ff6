"""What a plan rests on: which release's arithmetic, and which real starts verified it.

`MEASURED` is the registry of engine starts the planner was compared with on a real GPU,
one record per engine release, GPU and set of runs, with where the numbers are kept. A
plan names its arithmetic (the `SglangRelease` row or `VllmLine` it computed with), the
records inside that arithmetic's release window, and whether the requested release
itself was among them: a plan for a release nobody started is said to be unmeasured.
Append a record here when a new matrix of starts is committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from specpilot.engines.adapter import EngineRelease
from specpilot.engines.registry import engine_by_name


@dataclass(frozen=True)
class MeasuredRelease:
    """Real starts of one engine release that the planner's numbers were compared with."""

    engine: str
    release: str
    gpu: str
    starts: int
    #: where the runs, logs and comparison are kept (a path in this repository)
    source: str

    def describe(self) -> str:
        name = engine_by_name(self.engine).display_name
        return f"{name} {self.release} on {self.gpu}, {self.starts} starts, {self.source}"


MEASURED: tuple[MeasuredRelease, ...] = (
    # 6 matrix starts (hybrid/MTP/dense x 95.6/79.6 GiB budgets) + 3 `up` starts, 2026-11-29
    MeasuredRelease("vllm", "0.26.0", "H200", 9, "docs/gpu-validation.md"),
    # gpu/sglang/run_matrix.sh, 2026-11-30: 8 fitting starts + 4 recommendations started
    # out of sample each (tests/data/startup_logs/sglang-h200/r13-*)
    MeasuredRelease("sglang", "0.5.13.post1", "H200", 12, "docs/gpu-validation.md"),
    MeasuredRelease("sglang", "0.5.17", "H200", 12, "docs/gpu-validation.md"),
)


@dataclass(frozen=True)
class Provenance:
    """The arithmetic a plan used and the measured starts behind it."""

    arithmetic: str
    measured_starts: tuple[str, ...]
    #: whether the requested release itself was started for real
    release_measured: bool

    def summary(self, engine: str, version: str) -> str:
        basis = f"arithmetic of {self.arithmetic}"
        if not self.measured_starts:
            return f"{basis}; no measured starts in that window: the plan is unverified on a real GPU"
        starts = "; ".join(self.measured_starts)
        if self.release_measured:
            return f"{basis}; measured: {starts}"
        name = engine_by_name(engine).display_name
        return f"{basis}; measured: {starts}. {name} {version} itself is unmeasured"

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
        measured_starts=tuple(r.describe() for r in records),
        release_measured=any(_same_release(Version(r.release), requested) for r in records),
    )
