"""`check --fix`: apply the findings' fixes until the same release accepts the launch."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from packaging.version import Version

from specpilot.check.flagtable import table_for
from specpilot.check.types import CheckResult
from specpilot.fixes import Fix

#: how many fix-and-recheck rounds before giving up (a fix can unmask one more finding)
MAX_ROUNDS = 4


@dataclass
class FixedLaunch:
    args: list[str]
    env: dict[str, str]
    result: CheckResult
    applied: list[str]


def _drop_flag(argv: list[str], spellings: set[str], takes_value: Callable[[str], bool]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, has_inline, _ = token.partition("=")
        i += 1
        if name in spellings:
            if not has_inline and takes_value(name) and i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        out.append(token)
    return out


def apply_fix(
    engine: str, version: Version, argv: Sequence[str], env: Mapping[str, str], fix: Fix
) -> tuple[list[str], dict[str, str]]:
    """Set the fix's flags (replacing any spelling of the same flag), drop what it removes."""
    table = table_for(engine, version)

    def takes_value(name: str) -> bool:
        flag = table.by_spelling.get(name)
        return flag is None or flag.kind != "bool"

    new_argv = _drop_flag(list(argv), set(fix.remove_args), takes_value)
    i = 0
    while i < len(fix.args):
        name = fix.args[i]
        flag = table.by_spelling.get(name)
        has_value = (
            (flag is None or flag.kind != "bool")
            and i + 1 < len(fix.args)
            and not fix.args[i + 1].startswith("--")
        )
        value = fix.args[i + 1] if has_value else None
        i += 2 if has_value else 1
        same = set(flag.spellings) if flag else {name}
        if flag is not None:
            same |= {f for f, info in table.by_spelling.items() if info.dest == flag.dest}
        new_argv = _drop_flag(new_argv, same, takes_value)
        new_argv += [name] if value is None else [name, value]
    new_env = {k: v for k, v in env.items() if k not in fix.remove_env}
    new_env.update(fix.env)
    return new_argv, new_env


def fix_launch(
    check: Callable[[list[str], dict[str, str]], CheckResult],
    engine: str,
    version: Version,
    argv: Sequence[str],
    env: Mapping[str, str],
) -> FixedLaunch:
    """Apply error (and removal/deprecation) fixes, re-checking after each round."""
    args, new_env = list(argv), dict(env)
    applied: list[str] = []
    result = check(args, new_env)
    for _ in range(MAX_ROUNDS):
        todo = [
            f
            for f in result.findings
            if f.fix is not None and (f.severity == "error" or f.rule in ("flag-deprecated", "env-removed"))
        ]
        if not todo:
            break
        for finding in todo:
            assert finding.fix is not None
            args, new_env = apply_fix(engine, version, args, new_env, finding.fix)
            applied.append(finding.rule)
        result = check(args, new_env)
    return FixedLaunch(args=args, env=new_env, result=result, applied=applied)


def render_command(program: Sequence[str], argv: Sequence[str], env: Mapping[str, str]) -> str:
    """A shell line a user can paste: `VAR=value program args...`, every token quoted."""
    parts = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    parts += [shlex.quote(t) for t in (*program, *argv)]
    return " ".join(parts)
