"""What an engine changes before restarting after it died of memory while serving.

Each engine contributes its rules as data (`Engine.serving_bounds`): the death in words, what
else its log since ready printed as it died (the out-of-memory line itself is the classifier's
to find, `signatures.SHARED`'s `cuda_oom`), the flag that bounds what killed it, and where its
value starts when the args do not set it. A restart halves the flag's value (at least 1); a
flag already at 1 leaves nothing to bound and the engine is restarted as it was. The first
rule that matches applies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    #: the death, in words (printed and recorded with the change)
    what: str
    #: what the log since ready also printed for this death; None: any out-of-memory death
    marker: str | None
    flag: str
    #: the value to halve when the args do not set `flag`: another flag's, else `default`
    start_from: str | None
    default: int
    source: str

    def matches(self, serving_log: str) -> bool:
        return self.marker is None or re.search(self.marker, serving_log) is not None


def flag_value(args: list[str], flag: str) -> int | None:
    """The last integer value of `flag` in an argv (`--flag N` or `--flag=N`)."""
    found: int | None = None
    for i, arg in enumerate(args):
        text = arg.partition("=")[2] if arg.startswith(flag + "=") else None
        if arg == flag and i + 1 < len(args):
            text = args[i + 1]
        if text is not None and text.strip().isdigit():
            found = int(text)
    return found


def without_flag(args: Sequence[str], flag: str) -> list[str]:
    """`args` less `flag` and its value."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if not arg.startswith(flag + "="):
            kept.append(arg)
    return kept


@dataclass(frozen=True)
class Bounded:
    """The args to restart with, and the rule and values that changed them."""

    args: tuple[str, ...]
    rule: Bound
    before: int | None
    after: int

    def line(self) -> str:
        was = "unset" if self.before is None else str(self.before)
        return f"{self.rule.what}: restarting with {self.rule.flag} {self.after} (was {was})"

    def to_json(self) -> dict[str, object]:
        return {"what": self.rule.what, "flag": self.rule.flag, "before": self.before, "after": self.after}


def bound_args(bounds: tuple[Bound, ...], args: list[str], serving_log: str) -> Bounded | None:
    """The args to restart with after an out-of-memory death whose log since ready is
    `serving_log` (the whole of it: the process can be found gone before its last lines were
    read); None when no rule matches or the flag is already at 1."""
    for rule in bounds:
        if not rule.matches(serving_log):
            continue
        before = flag_value(args, rule.flag)
        start = before
        if start is None and rule.start_from is not None:
            start = flag_value(args, rule.start_from)
        start = start if start is not None else rule.default * 2
        after = max(1, start // 2)
        if before is not None and after >= before:
            return None
        return Bounded((*without_flag(args, rule.flag), rule.flag, str(after)), rule, before, after)
    return None
