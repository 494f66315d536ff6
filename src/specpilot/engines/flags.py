"""Per-release flag tables: every flag a release's argparse defines, as JSON facts.

The tables under `engines/<engine>/flags/<release>.json` are extracted from the engines'
own argparse (tools/extract_sglang_flags.py, tools/extract_vllm_flags.py), so parsing
against the exact release is what lets `check` say "unrecognized", "renamed in 0.5.14"
or "removed in 0.5.23, use ..." instead of guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources

from packaging.version import InvalidVersion, Version

from specpilot.errors import UserError


@dataclass(frozen=True, eq=False)
class FlagInfo:
    name: str
    dest: str
    kind: str  # "bool" | "int" | "float" | "str" | "json" | "list"
    default: object
    aliases: tuple[str, ...]
    choices: tuple[str, ...] | None
    deprecated: bool
    replacement: str | None
    #: the spellings that set a boolean False, where the table lists them (vLLM 0.33.0's
    #: `--disable-x` / `--no-enable-x`); otherwise a `--no-` spelling is the negation
    negations: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"

    def convert(self, text: str) -> object:
        """The value's text as the flag's Python value (int, float, JSON); ValueError if it is not one."""
        if self.kind == "int":
            return int(text)
        if self.kind == "float":
            return float(text)
        if self.kind == "json":
            return json.loads(text)
        return text


@dataclass(frozen=True, eq=False)  # identity-hashed: cached indexes below
class ReleaseTable:
    engine: str
    version: Version
    flags: tuple[FlagInfo, ...]
    env: frozenset[str]
    #: whether this engine's parser takes `--max_num_seqs`, `-O3` and `--config.key value`
    flexible_parser: bool
    #: the same engine's older shipped tables, oldest first (`former_flags` reads them)
    older: tuple[ReleaseTable, ...] = field(default=(), repr=False)

    @property
    def by_spelling(self) -> dict[str, FlagInfo]:
        return _index(self)

    @property
    def by_dest(self) -> dict[str, FlagInfo]:
        return _dest_index(self)

    def defaults(self) -> dict[str, object]:
        return {f.dest: f.default for f in self.flags if not f.deprecated}


@cache
def _index(table: ReleaseTable) -> dict[str, FlagInfo]:
    return {s: f for f in table.flags for s in f.spellings}


@cache
def _dest_index(table: ReleaseTable) -> dict[str, FlagInfo]:
    out: dict[str, FlagInfo] = {}
    for f in table.flags:
        if f.dest not in out or out[f.dest].deprecated:
            out[f.dest] = f
    return out


def _flag(raw: dict[str, object]) -> FlagInfo:
    choices = raw.get("choices")
    return FlagInfo(
        name=str(raw["name"]),
        dest=str(raw["dest"]),
        kind=str(raw["kind"]),
        default=raw.get("default"),
        aliases=tuple(raw.get("aliases") or ()),  # type: ignore[arg-type]
        choices=tuple(choices) if isinstance(choices, list) else None,
        deprecated=bool(raw.get("deprecated")),
        replacement=raw.get("replacement") if isinstance(raw.get("replacement"), str) else None,  # type: ignore[arg-type]
        negations=tuple(raw.get("negations") or ()),  # type: ignore[arg-type]
    )


@cache
def load_tables(engine: str, package: str, *, flexible_parser: bool) -> tuple[ReleaseTable, ...]:
    """The tables shipped in `package`'s `flags/` folder, oldest first (an adapter's
    `release_tables`). `flexible_parser`: the engine's parser rewrites argv before argparse
    sees it (vLLM's FlexibleArgumentParser)."""
    folder = resources.files(package) / "flags"
    tables = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".json"):
            continue
        raw = json.loads(entry.read_text())
        tables.append(
            ReleaseTable(
                engine=engine,
                version=Version(raw["version"]),
                flags=tuple(_flag(f) for f in raw["flags"]),
                env=frozenset(raw.get("env", ())),
                flexible_parser=flexible_parser,
            )
        )
    ordered = sorted(tables, key=lambda t: t.version)
    return tuple(replace(table, older=tuple(ordered[:i])) for i, table in enumerate(ordered))


@cache
def former_flags(table: ReleaseTable) -> dict[str, FlagInfo]:
    """Spellings older releases defined that this one does not, with their newest older flag:
    how many values such a flag took, so an argv written for an older release reads right."""
    out: dict[str, FlagInfo] = {}
    for older in table.older:
        out.update({s: f for s, f in older.by_spelling.items() if s not in table.by_spelling})
    return out


def table_among(tables: tuple[ReleaseTable, ...], version: Version) -> ReleaseTable:
    """`table_for` over one engine's tables, oldest first."""
    eligible = [t for t in tables if t.version.release <= version.release]
    return eligible[-1] if eligible else tables[0]


def parse_version(text: str) -> Version:
    """A spec's `[engine] version` as a release number; anything else is the spec's error."""
    try:
        return Version(text)
    except InvalidVersion:
        raise UserError(
            f"not a release version: {text!r}", field="[engine] version", fix="e.g. 0.5.13.post1"
        ) from None
