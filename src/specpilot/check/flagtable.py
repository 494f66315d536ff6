"""Per-release flag tables (JSON facts extracted from the engines' argparse) and argv parsing.

Parsing against the exact release's table is what lets `check` say "unrecognized", "renamed
in 0.5.14" or "removed in 0.5.23, use ..." instead of guessing.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from packaging.version import Version

from specpilot.check.ranges import ValueRange
from specpilot.check.types import Finding
from specpilot.engines.args import convert_value
from specpilot.fixes import Fix


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

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass(frozen=True, eq=False)  # identity-hashed: cached indexes below
class ReleaseTable:
    engine: str
    version: Version
    flags: tuple[FlagInfo, ...]
    env: frozenset[str]

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
    )


@cache
def release_tables(engine: str) -> tuple[ReleaseTable, ...]:
    """All shipped tables of an engine, oldest first."""
    folder = resources.files(f"specpilot.engines.{engine}") / "flags"
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
            )
        )
    return tuple(sorted(tables, key=lambda t: t.version))


def table_for(engine: str, version: Version) -> ReleaseTable:
    """The newest shipped table of a release line at or below `version` (the oldest one below the first).

    Compared by release number, so "0.5.13" finds the 0.5.13.post1 table.
    """
    tables = release_tables(engine)
    eligible = [t for t in tables if t.version.release <= version.release]
    return eligible[-1] if eligible else tables[0]


@cache
def value_ranges(engine: str) -> dict[str, ValueRange]:
    """The engine's `VALUE_RANGES` by dest (imported late: the engine modules import this one)."""
    module = importlib.import_module(f"specpilot.engines.{engine}.flags")
    return {r.dest: r for r in getattr(module, "VALUE_RANGES", ())}


@dataclass
class ParsedArgs:
    values: dict[str, object]
    given: set[str]
    spelled: dict[str, str]
    positional: list[str]
    findings: list[Finding]


def _history_finding(engine: str, version: Version, spelling: str, token_value: str | None) -> Finding:
    """Explain a flag this release does not know, from the other releases' tables."""
    tables = release_tables(engine)
    older = [t for t in tables if t.version.release < version.release and spelling in t.by_spelling]
    newer = [t for t in tables if t.version.release > version.release and spelling in t.by_spelling]
    if older:
        flag = older[-1].by_spelling[spelling]
        replacement = flag.replacement
        if replacement is None:
            # a flag gone from this release whose dest lives on under another name
            current = table_for(engine, version).by_dest.get(flag.dest)
            replacement = current.name if current else None
        gone_in = next(t.version for t in tables if t.version > older[-1].version)
        fix_args: tuple[str, ...] = ()
        if replacement and flag.kind == "bool":
            fix_args = (replacement,)
        elif replacement and token_value:
            fix_args = (replacement, token_value)
        message = f"{spelling} was removed in {engine} {gone_in} (last in {older[-1].version})"
        message += f"; use {replacement}" if replacement else "; drop it"
        return Finding(
            "flag-removed",
            "error",
            message + f" ({engine} {version} exits with 'unrecognized arguments: {spelling}')",
            Fix(args=tuple(a for a in fix_args if a), remove_args=(spelling,)),
        )
    if newer:
        return Finding(
            "flag-not-yet",
            "error",
            f"{spelling} does not exist in {engine} {version}; it appears in {newer[0].version}",
            Fix(remove_args=(spelling,)),
        )
    return Finding(
        "flag-unknown",
        "error",
        f"unrecognized arguments: {spelling} ({engine} {version} does not define this flag)",
        Fix(remove_args=(spelling,)),
    )


def _abbreviation(index: dict[str, FlagInfo], spelling: str) -> FlagInfo | None:
    """argparse's allow_abbrev: a unique prefix of one flag's spelling names that flag."""
    matches = {id(f): f for s, f in index.items() if s.startswith(spelling)}
    return next(iter(matches.values())) if len(matches) == 1 else None


def parse_argv(engine: str, version: Version, argv: list[str]) -> ParsedArgs:
    """Parse like the release's argparse; problems become findings instead of exits."""
    table = table_for(engine, version)
    index = table.by_spelling
    parsed = ParsedArgs(values={}, given=set(), spelled={}, positional=[], findings=[])
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        spelling, has_inline, inline = token.partition("=")
        if not token.startswith("--") and spelling not in index:  # short aliases like vLLM's -tp
            parsed.positional.append(token)
            continue
        if spelling not in index and "_" in spelling:  # vLLM accepts --max_num_seqs
            spelling = spelling.replace("_", "-")
        flag = index.get(spelling) or _abbreviation(index, spelling)
        if flag is None:
            value: str | None = inline if has_inline else None
            if not has_inline and i < len(argv) and not argv[i].startswith("--"):
                value = argv[i]
                i += 1
            parsed.findings.append(_history_finding(engine, version, spelling, value))
            continue
        if flag.kind == "bool":
            # vLLM's BooleanOptionalAction: --no-<flag> sets False
            parsed.values[flag.dest] = not (
                spelling.startswith("--no-") and not flag.name.startswith("--no-")
            )
        elif flag.kind == "list":
            items = [inline] if has_inline else []
            while not has_inline and i < len(argv) and not argv[i].startswith("--"):
                items.append(argv[i])
                i += 1
            parsed.values[flag.dest] = items
        else:
            if has_inline:
                text = inline
            elif i < len(argv):
                text = argv[i]
                i += 1
            else:
                parsed.findings.append(
                    Finding("flag-missing-value", "error", f"argument {spelling}: expected one argument")
                )
                continue
            if flag.choices is not None and text not in flag.choices:
                parsed.findings.append(
                    Finding(
                        "flag-invalid-choice",
                        "error",
                        f"argument {spelling}: invalid choice: {text!r} "
                        f"(choose from {', '.join(flag.choices)})",
                    )
                )
                continue
            try:
                parsed.values[flag.dest] = convert_value(flag.kind, text)
            except ValueError:
                parsed.findings.append(
                    Finding(
                        "flag-invalid-value",
                        "error",
                        f"argument {spelling}: invalid {flag.kind} value: {text!r}",
                    )
                )
                continue
            value_range = value_ranges(engine).get(flag.dest)
            problem = value_range.problem(text) if value_range is not None else None
            if problem is not None:
                parsed.findings.append(
                    Finding(
                        "flag-out-of-range",
                        "error",
                        f"argument {spelling}: {problem} ({engine} refuses it at startup)",
                        Fix(remove_args=(spelling,)),
                    )
                )
        parsed.given.add(flag.dest)
        parsed.spelled[flag.dest] = spelling
        if flag.deprecated:
            new = flag.replacement
            message = f"{spelling} is deprecated in {engine} {version}"
            message += f"; use {new}" if new else ""
            fix_args: tuple[str, ...] = ()
            if new:
                fix_args = (new,) if flag.kind == "bool" else (new, str(parsed.values[flag.dest]))
            parsed.findings.append(
                Finding("flag-deprecated", "warning", message, Fix(args=fix_args, remove_args=(spelling,)))
            )
    return parsed


def env_findings(
    engine: str,
    version: Version,
    env: dict[str, str],
    prefixes: tuple[str, ...],
    replacements: dict[str, str],
) -> list[Finding]:
    """Engine env vars this release no longer (or never) reads."""
    table = table_for(engine, version)
    tables = release_tables(engine)
    findings = []
    for name in env:
        if not name.startswith(prefixes) or name in table.env:
            continue
        older = [t for t in tables if t.version.release < version.release and name in t.env]
        hint = replacements.get(name, "")
        if older:
            message = f"{name} was removed after {engine} {older[-1].version}; {engine} {version} ignores it"
        else:
            message = f"{name} is not an environment variable {engine} {version} reads"
        findings.append(
            Finding(
                "env-removed" if older else "env-unknown",
                "warning",
                message + (f" ({hint})" if hint else ""),
                Fix(remove_env=(name,)),
            )
        )
    return findings
