"""SGLang's per-release flag tables (flags/<release>.json, from tools/extract_sglang_flags.py).

`release_flags(version)` is the hook `specpilot.engines.args.flag_table` calls: every flag the
release's argparse defines, as `FlagDef`s, from the newest shipped table at or below `version`.
"""

from __future__ import annotations

from specpilot.check.flagtable import table_for
from specpilot.engines.args import FlagDef, FlagKind

_KINDS: dict[str, FlagKind] = {
    "bool": "bool",
    "int": "int",
    "float": "float",
    "str": "str",
    "json": "json",
    "list": "list",
}


def release_flags(version: str) -> list[FlagDef]:
    from packaging.version import Version

    table = table_for("sglang", Version(version))
    return [
        FlagDef(
            name=f.name,
            dest=f.dest,
            kind=_KINDS.get(f.kind, "str"),
            default=f.default,
            aliases=f.aliases,
            choices=f.choices,
        )
        for f in table.flags
    ]
