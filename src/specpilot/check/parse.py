"""A launch's argv and env as a release reads them: values, and findings for what it refuses.

Parsing against the exact release's table (engines/flags.py, read by engines/argv.py) is
what lets `check` say "unrecognized", "renamed in 0.5.14" or "removed in 0.5.23, use ..."
instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from specpilot.engines.adapter import EngineRelease
from specpilot.engines.argv import FlagUse, read_argv, with_dotted_key
from specpilot.engines.fix import Fix
from specpilot.engines.flags import FlagInfo, ReleaseTable
from specpilot.engines.rules import Finding


@dataclass
class ParsedArgs:
    values: dict[str, object]
    given: set[str]
    spelled: dict[str, str]
    positional: list[str]
    findings: list[Finding]


def _history_finding(release: EngineRelease, spelling: str, values: tuple[str, ...]) -> Finding:
    """Explain a flag this release does not know, from the other releases' tables."""
    engine, version, tables = release.name, release.version, release.tables
    older = [t for t in tables if t.version.release < version.release and spelling in t.by_spelling]
    newer = [t for t in tables if t.version.release > version.release and spelling in t.by_spelling]
    if older:
        flag = older[-1].by_spelling[spelling]
        replacement = flag.replacement
        if replacement is None:
            # a flag gone from this release whose dest lives on under another name
            current = release.table.by_dest.get(flag.dest)
            replacement = current.name if current else None
        gone_in = next(t.version for t in tables if t.version > older[-1].version)
        fix_args: tuple[str, ...] = ()
        if replacement and flag.kind == "bool":
            fix_args = (replacement,)
        elif replacement and values:
            fix_args = (replacement, *values)
        message = f"{spelling} was removed in {engine} {gone_in} (last in {older[-1].version})"
        message += f"; use {replacement}" if replacement else "; drop it"
        return Finding(
            "flag-removed",
            "error",
            message + f" ({engine} {version} exits with '{_refusal(release.table, spelling)}')",
            Fix(args=tuple(a for a in fix_args if a), remove_args=(spelling,)),
        )
    if newer:
        return Finding(
            "flag-not-yet",
            "error",
            f"{spelling} does not exist in {engine} {version}; it appears in {newer[0].version}",
            Fix(remove_args=(spelling,)),
        )
    return _unknown_finding(release, spelling, values)


def _unknown_finding(release: EngineRelease, spelling: str, values: tuple[str, ...]) -> Finding:
    """An option no release defines: the release's nearest flags when the name is within reach
    of one (a typo is renamed, never dropped), else drop it."""
    message = (
        f"unrecognized arguments: {spelling} ({release.name} {release.version} does not define this flag)"
    )
    near = nearest_flags(release.table, spelling)
    if not near:
        return Finding("flag-unknown", "error", message, Fix(remove_args=(spelling,)))
    meanings = ", ".join(f"{f.name} ({flag_meaning(f)})" for f in near)
    if len(near) > 1:
        text = f"pick the flag meant and write it in place of {spelling}"
        return Finding("flag-unknown", "error", f"{message}; nearest: {meanings}", Fix(text=text))
    flag = near[0]
    if flag.takes_value:
        args: tuple[str, ...] = (flag.name, *values)
    elif not values:
        args = (flag.name,)
    else:  # a switch typed with values: which of them were meant as arguments is a guess
        return Finding(
            "flag-unknown",
            "error",
            f"{message}; did you mean {meanings}?",
            Fix(text=f"write {flag.name} in place of {spelling} and place {' '.join(values)} yourself"),
        )
    return Finding(
        "flag-unknown",
        "error",
        f"{message}; did you mean {meanings}?",
        Fix(args=args, remove_args=(spelling,)),
    )


def flag_meaning(flag: FlagInfo) -> str:
    """What a flag takes, in a few words: `str, one of EAGLE, NEXTN; default None`."""
    if flag.kind == "bool":
        return "a switch"
    words = {**_KIND_WORDS, "str": "text", "list": "values"}.get(flag.kind, flag.kind)
    if flag.choices:
        words += ", one of " + ", ".join(flag.choices)
    return f"{words}; default {flag.default}"


def typo_reach(typed: str) -> int:
    """How many edits a typed option may be from a flag to read as its typo: one per six
    characters of the name, at least 1 and at most 3 (`--tq` is one from `--tp`)."""
    return max(1, min(3, len(typed.lstrip("-")) // 6))


def nearest_flags(table: ReleaseTable, typed: str) -> list[FlagInfo]:
    """The release's flags whose long spellings are nearest to an unknown option, within
    `typo_reach` edits (insert, delete, replace, swap two neighbours); ties all returned."""
    wanted = typed.split("=", 1)[0]
    if table.flexible_parser:  # vLLM reads --max_num_seqs as --max-num-seqs
        wanted = "--" + wanted.lstrip("-").replace("_", "-")
    reach = typo_reach(wanted)
    letters = frozenset(wanted)
    best: dict[int, list[FlagInfo]] = {}
    for spelling, spelling_letters, flag in _long_spellings(table):
        # one edit changes at most two letters present in one name and not in the other
        if abs(len(spelling) - len(wanted)) > reach or len(letters ^ spelling_letters) > 2 * reach:
            continue
        distance = edit_distance(wanted, spelling, reach)
        if distance <= reach and flag not in best.get(distance, []):
            best.setdefault(distance, []).append(flag)
    if not best:
        return []
    return sorted(best[min(best)], key=lambda f: f.name)


@cache
def _long_spellings(table: ReleaseTable) -> tuple[tuple[str, frozenset[str], FlagInfo], ...]:
    return tuple((s, frozenset(s), f) for s, f in table.by_spelling.items() if s.startswith("--"))


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance between a and b (insert, delete, replace, swap two
    neighbours), or limit + 1 once it exceeds limit. Only cells within `limit` of the diagonal
    can stay within it, so only those are computed, after the common ends are cut off."""
    while a and b and a[0] == b[0]:
        a, b = a[1:], b[1:]
    while a and b and a[-1] == b[-1]:
        a, b = a[:-1], b[:-1]
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    over = limit + 1
    before: list[int] = []
    previous = [j if j <= limit else over for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        row = [i if i <= limit else over] + [over] * len(b)
        for j in range(max(1, i - limit), min(len(b), i + limit) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            value = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                value = min(value, before[j - 2] + 1)
            row[j] = min(value, over)
        if min(row) > limit:
            return over
        before, previous = previous, row
    return previous[-1]


def _refusal(table: ReleaseTable, spelling: str) -> str:
    """argparse's error for an option the release lacks: a prefix of two or more of its long
    flags is ambiguous (allow_abbrev), anything else unrecognized."""
    matches = sorted({f.name for s, f in table.by_spelling.items() if s.startswith(spelling)})
    if spelling.startswith("--") and len(matches) > 1:
        return f"ambiguous option: {spelling} could match {', '.join(matches)}"
    return f"unrecognized arguments: {spelling}"


_KIND_WORDS = {"int": "an integer", "float": "a number", "json": "JSON"}


def _value_findings(release: EngineRelease, use: FlagUse, parsed: ParsedArgs) -> bool:
    """Convert a known flag's value into `parsed`; False (with a finding) when the release refuses it."""
    flag = use.flag
    assert flag is not None
    if flag.kind == "bool":
        parsed.values[flag.dest] = not use.negated
        return True
    if flag.kind == "list":
        parsed.values[flag.dest] = list(use.values)
        return True
    if use.key_path and use.values:
        parsed.values[flag.dest] = with_dotted_key(flag.kind, parsed.values.get(flag.dest), use)
        return True
    if use.missing_value:
        parsed.findings.append(
            Finding("flag-missing-value", "error", f"argument {use.typed}: expected one argument")
        )
        return False
    text = use.values[0]
    if flag.choices is not None and text not in flag.choices:
        parsed.findings.append(
            Finding(
                "flag-invalid-choice",
                "error",
                f"argument {use.typed}: invalid choice: {text!r} (choose from {', '.join(flag.choices)})",
            )
        )
        return False
    try:
        parsed.values[flag.dest] = flag.convert(text)
    except ValueError:
        parsed.findings.append(
            Finding(
                "flag-invalid-value",
                "error",
                f"argument {use.typed}: invalid {flag.kind} value: {text!r}",
                Fix(text=f"write {use.typed} followed by {_KIND_WORDS.get(flag.kind, flag.kind)}"),
            )
        )
        return False
    value_range = release.engine.value_ranges.get(flag.dest)
    problem = value_range.problem(text) if value_range is not None else None
    if problem is not None:
        parsed.findings.append(
            Finding(
                "flag-out-of-range",
                "error",
                f"argument {use.typed}: {problem} ({release.name} refuses it at startup)",
                Fix(remove_args=(use.typed,)),
            )
        )
    return True


def parse_argv(release: EngineRelease, argv: list[str]) -> ParsedArgs:
    """Parse like the release's argparse; problems become findings instead of exits."""
    read = read_argv(release.table, argv)
    parsed = ParsedArgs(values={}, given=set(), spelled={}, positional=list(read.positional), findings=[])
    for use in read.uses:
        flag = use.flag
        if flag is None:
            parsed.findings.append(_history_finding(release, use.typed, use.values))
            continue
        if not _value_findings(release, use, parsed):
            continue
        parsed.given.add(flag.dest)
        parsed.spelled[flag.dest] = use.spelling
        if flag.deprecated:
            new = flag.replacement
            message = f"{use.spelling} is deprecated in {release.name} {release.version}"
            message += f"; use {new}" if new else ""
            fix_args: tuple[str, ...] = ()
            if new:
                fix_args = (new,) if flag.kind == "bool" else (new, str(parsed.values[flag.dest]))
            parsed.findings.append(
                Finding("flag-deprecated", "warning", message, Fix(args=fix_args, remove_args=(use.typed,)))
            )
    return parsed


def env_findings(release: EngineRelease, env: dict[str, str]) -> list[Finding]:
    """Engine env vars this release no longer (or never) reads."""
    engine, version, tables = release.name, release.version, release.tables
    findings = []
    for name in env:
        if not name.startswith(release.engine.env_prefixes) or name in release.table.env:
            continue
        older = [t for t in tables if t.version.release < version.release and name in t.env]
        hint = release.engine.env_replacements.get(name, "")
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
