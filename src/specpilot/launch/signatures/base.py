"""What one log signature is: a declarative pattern over one engine log line.

Engine knowledge is data: each ready line, progress phase, allocation number and
fatal error is one `Signature`, and the classifier only iterates over them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    """What a matching line tells the supervisor."""

    READY = "ready"  # the engine says it serves
    PROGRESS = "progress"  # a startup phase began (weights, KV pool, graphs)
    FATAL = "fatal"  # the engine failed; `cause` classifies it
    ALLOCATION = "allocation"  # a number the engine allocated (named group `value`)


#: cause classes of `specpilot up --json`
CAUSES = (
    "ready",
    "oom",
    "config",
    "bad_args",
    "port_in_use",
    "crash",
    "hang",
    "import_error",
    "nccl",
    "mismatch",
    "timeout",
    "unknown",
)


@dataclass(frozen=True)
class SignatureFix:
    """What to change when a signature matched: prose plus concrete args/env."""

    text: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Signature:
    """One pattern over one log line.

    `engine` is "sglang", "vllm" or "*" (both). `name` is the phase (progress), the
    allocation key (allocation) or a short id (fatal). Fatal signatures are tried in
    list order over the whole collected error text, so specific ones come first.
    """

    engine: str
    kind: Kind
    name: str
    pattern: str
    cause: str | None = None
    fix: SignatureFix | None = None
    source: str | None = None  # where the line was seen (public issue URL)
    #: the server can no longer serve (not one request failing): after ready, only such
    #: a line ends the run; the cause is still decided over its whole error block
    ends_serving: bool = False

    def __post_init__(self) -> None:
        if self.kind is Kind.FATAL and self.cause not in CAUSES:
            raise ValueError(f"signature {self.name}: unknown cause {self.cause!r}")
        if self.kind is Kind.ALLOCATION and "(?P<value>" not in self.pattern:
            raise ValueError(f"signature {self.name}: allocation needs a (?P<value>...) group")

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern)

    def applies_to(self, engine: str) -> bool:
        return self.engine in ("*", engine)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _CACHE.get(pattern)
    if compiled is None:
        compiled = _CACHE[pattern] = re.compile(pattern, re.MULTILINE)  # ^ and $ per line
    return compiled
