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

from specpilot.engines.measured import ENGINE_NAMES, MeasuredRelease
from specpilot.engines.sglang import releases as sglang_releases
from specpilot.engines.sglang.releases import release_rules
from specpilot.engines.vllm import releases as vllm_releases
from specpilot.engines.vllm.releases import vllm_line

#: every engine's measured starts, each kept beside its release table
MEASURED: tuple[MeasuredRelease, ...] = (*vllm_releases.MEASURED, *sglang_releases.MEASURED)


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
        name = ENGINE_NAMES.get(engine, engine)
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


def provenance(engine: str, version: str, measured: tuple[MeasuredRelease, ...] = MEASURED) -> Provenance:
    """The arithmetic window of `version` and the measured starts inside it."""
    requested = Version(version)
    if engine == "sglang":
        row = release_rules(version)
        first, last = Version(row.first), Version(row.last)
        window = first.base_version if first == last else f"{first}-{last}"
        arithmetic = f"SGLang {window}"

        def inside(release: Version) -> bool:
            return first <= Version(release.base_version) <= last
    else:
        line = vllm_line(version)
        arithmetic = f"vLLM {line.name}"

        def inside(release: Version) -> bool:
            return line.covers(Version(release.base_version))

    records = [r for r in measured if r.engine == engine and inside(Version(r.release))]
    return Provenance(
        arithmetic=arithmetic,
        measured_starts=tuple(r.describe() for r in records),
        release_measured=any(_same_release(Version(r.release), requested) for r in records),
    )
