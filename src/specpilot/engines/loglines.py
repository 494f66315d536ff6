"""The language of an engine's startup log: each printed quantity declared once, as data.

A `LogQuantity` names one number (or word) an engine prints: the line's regex, the
unit, which occurrence counts (`Pick`) and the engine source line that prints it.
`LogReading` is the one reader of them: `up`'s supervisor feeds it line by line as the
log grows, calibration (`plan --from-log`) feeds it a saved log; both get the same values.

Why explicit picks: a line can be printed more than once. Every rank of a multi-GPU
server prints its own copy (the ranks agree), and with speculative decoding SGLang loads
the draft model after the target and prints a second weight line and KV line for it.
"The last line wins" read the draft's weights as the target's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

#: colour codes anywhere in a line (vLLM colours its process prefixes and levels)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: the first bracketed or parenthesized tag of a line, e.g. "[2026-01-01 10:00:00 TP1]"
#: or "(VllmWorker TP1 pid=77)"; the rank is the parallel ranks named in it
_TAG = re.compile(r"[\[(]([^\[\]()]*)[\])]")
_RANK = re.compile(r"(?<![A-Za-z0-9])(?:TP|DP|PP|EP|CP)\d+")

Value = int | float | str


class Pick(StrEnum):
    """Which printing of a line counts, per rank (each rank prints its own copy)."""

    FIRST = "first"  # the first printing: the target model (the draft loads after it)
    SECOND = "second"  # the second printing by the same rank: SGLang's speculative draft


class Unit(StrEnum):
    """What the captured text is, and so how it is read."""

    GIB = "GiB"  # SGLang prints "GB" for GiB (it divides by 1 << 30)
    TOKENS = "tokens"
    COUNT = "count"
    FRACTION = "fraction"
    TIMES = "x"  # a ratio such as vLLM's "Maximum concurrency ...: 3.20x"
    TEXT = "text"  # a release or an architecture name


_INTEGERS = frozenset({Unit.TOKENS, Unit.COUNT})


@dataclass(frozen=True)
class LogQuantity:
    """One printed quantity: the key it fills, the line that prints it, its unit and pick.

    Several declarations may fill one key (another release's wording, a later line that
    repeats the number): the one declared first wins, whatever order the lines come in.
    """

    key: str
    pattern: re.Pattern[str]
    unit: Unit
    #: the engine source line that prints it (a public URL)
    source: str
    pick: Pick = Pick.FIRST
    #: the regex group that holds the value
    group: str = "value"

    def __post_init__(self) -> None:
        if self.group not in self.pattern.groupindex:
            raise ValueError(f"log quantity {self.key}: the pattern has no (?P<{self.group}>...) group")

    def value(self, match: re.Match[str]) -> Value:
        raw = match.group(self.group)
        if self.unit is Unit.TEXT:
            return raw
        plain = raw.replace(",", "")
        return int(plain) if self.unit in _INTEGERS else float(plain)


def rank_of(line: str) -> tuple[str, ...]:
    """The parallel ranks a line's first tag names (empty for an untagged line)."""
    tag = _TAG.search(line)
    return () if tag is None else tuple(_RANK.findall(tag.group(1)))


class LogReading:
    """The values of `quantities` in the lines fed so far."""

    def __init__(self, quantities: tuple[LogQuantity, ...]) -> None:
        self.quantities = quantities
        self.values: dict[str, Value] = {}
        self._winner: dict[str, int] = {}  # key -> index of the declaration that filled it
        self._printings: dict[tuple[int, tuple[str, ...]], int] = {}

    def feed(self, line: str) -> tuple[str, ...]:
        """Read one line; the keys it filled or replaced."""
        text = ANSI.sub("", line)
        filled: list[str] = []
        rank: tuple[str, ...] | None = None
        for index, quantity in enumerate(self.quantities):
            match = quantity.pattern.search(text)
            if match is None:
                continue
            if rank is None:
                rank = rank_of(text)
            printing = self._printings.get((index, rank), 0) + 1
            self._printings[(index, rank)] = printing
            wanted = 1 if quantity.pick is Pick.FIRST else 2
            winner = self._winner.get(quantity.key)
            if printing != wanted or (winner is not None and winner <= index):
                continue
            self.values[quantity.key] = quantity.value(match)
            self._winner[quantity.key] = index
            filled.append(quantity.key)
        return tuple(filled)

    def feed_all(self, lines: Iterable[str]) -> dict[str, Value]:
        for line in lines:
            self.feed(line)
        return self.values


def read_log(quantities: tuple[LogQuantity, ...], text: str) -> dict[str, Value]:
    """The values of `quantities` in a whole log."""
    return dict(LogReading(quantities).feed_all(text.splitlines()))
