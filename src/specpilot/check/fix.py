"""`check --fix`: apply the findings' fixes until the same release accepts the launch."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from packaging.version import Version

from specpilot.check.types import CheckResult
from specpilot.engines.flags import table_for

#: how many fix-and-recheck rounds before giving up (a fix can unmask one more finding)
MAX_ROUNDS = 4


@dataclass
class FixedLaunch:
    args: list[str]
    env: dict[str, str]
    result: CheckResult
    applied: list[str]


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
            args, new_env = finding.fix.apply(table_for(engine, version), args, new_env)
            applied.append(finding.rule)
        result = check(args, new_env)
    return FixedLaunch(args=args, env=new_env, result=result, applied=applied)


def render_command(program: Sequence[str], argv: Sequence[str], env: Mapping[str, str]) -> str:
    """A shell line a user can paste: `VAR=value program args...`, every token quoted."""
    parts = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    parts += [shlex.quote(t) for t in (*program, *argv)]
    return " ".join(parts)
