"""vLLM's per-release flag tables (flags/<release>.json, from tools/extract_vllm_flags.py).

`release_flags(version)` is the hook `specpilot.engines.args.flag_table` calls: every flag of
`vllm serve` as `FlagDef`s, from the newest shipped table at or below `version` (the oldest
shipped one, 0.32.0, stands in for earlier releases).
"""

from __future__ import annotations

from packaging.version import Version

from specpilot.check.flagtable import table_for
from specpilot.engines.args import FlagDef, flag_kind


def release_flags(version: str) -> list[FlagDef]:
    table = table_for("vllm", Version(version))
    return [
        FlagDef(
            name=f.name,
            dest=f.dest,
            kind="json" if f.dest == "speculative_config" else flag_kind(f.kind),
            default=f.default,
            aliases=tuple(a for a in f.aliases if not a.startswith("--no-")),
            choices=f.choices,
            negatable=any(a.startswith("--no-") for a in f.aliases),
        )
        for f in table.flags
    ]
