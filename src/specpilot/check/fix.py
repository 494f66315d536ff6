"""`check --fix`: apply the findings' fixes until the same release accepts the launch.

A fix that would delete a flag carrying the user's intent (check/intent.py) is not applied:
it is named in `refused`, and the launch stays rejected until the user decides.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.version import Version

from specpilot.check.intent import intent_of_option
from specpilot.check.types import CheckResult
from specpilot.engines.flags import ReleaseTable
from specpilot.engines.registry import table_for
from specpilot.engines.rules import Finding

#: how many fix-and-recheck rounds before giving up (a fix can unmask one more finding)
MAX_ROUNDS = 4


@dataclass
class FixedLaunch:
    args: list[str]
    env: dict[str, str]
    result: CheckResult
    applied: list[str]
    #: fixes not made, each a line: which finding, which flag it would drop, what that flag meant
    refused: list[str] = field(default_factory=list)


def refusal(table: ReleaseTable, finding: Finding) -> str | None:
    """Why `finding`'s fix must not be applied: it deletes, without a replacement, a flag that
    carries speculation, memory, parallelism or the model; None when it may be."""
    fix = finding.fix
    if fix is None or fix.args:
        return None
    kept = [(s, kind) for s in fix.remove_args if (kind := intent_of_option(table, s)) is not None]
    if not kept:
        return None
    named = ", ".join(f"{spelling} ({kind})" for spelling, kind in kept)
    return f"{finding.rule}: would drop {named}; not done: change it yourself"


def fix_launch(
    check: Callable[[list[str], dict[str, str]], CheckResult],
    engine: str,
    version: Version,
    argv: Sequence[str],
    env: Mapping[str, str],
) -> FixedLaunch:
    """Apply error (and removal/deprecation) fixes, re-checking after each round; a fix that
    would drop an intent-carrying flag is refused (named in `refused`), never applied."""
    table = table_for(engine, version)
    args, new_env = list(argv), dict(env)
    applied: list[str] = []
    refused: list[str] = []
    result = check(args, new_env)
    for _ in range(MAX_ROUNDS):
        todo = []
        for finding in result.findings:
            if finding.fix is None or not (
                finding.severity == "error" or finding.rule in ("flag-deprecated", "env-removed")
            ):
                continue
            fix = finding.fix
            if not (fix.args or fix.env or fix.remove_args or fix.remove_env):
                continue  # words only: nothing to apply
            if (why := refusal(table, finding)) is not None:
                refused += [why] if why not in refused else []
            else:
                todo.append(finding)
        if not todo:
            break
        for finding in todo:
            assert finding.fix is not None
            args, new_env = finding.fix.apply(table, args, new_env)
            applied.append(finding.rule)
        result = check(args, new_env)
    return FixedLaunch(args=args, env=new_env, result=result, applied=applied, refused=refused)


def render_command(program: Sequence[str], argv: Sequence[str], env: Mapping[str, str]) -> str:
    """A shell line a user can paste: `VAR=value program args...`, every token quoted."""
    parts = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    parts += [shlex.quote(t) for t in (*program, *argv)]
    return " ".join(parts)
