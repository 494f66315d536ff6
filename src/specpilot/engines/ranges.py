"""Value ranges of engine flags, checked the way the engine checks them.

A flag table (extracted from argparse) knows a flag's kind, not which values the
engine's config validation then refuses: `--gpu-memory-utilization 1.5` parses as a
float and vLLM exits at startup. Each engine lists its ranges as data
(`specpilot.engines.<engine>.flags.VALUE_RANGES`); `check` (and so `plan`, which runs
`check` first) reports a value outside one as an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from specpilot.engines.human_int import human_int


@dataclass(frozen=True)
class ValueRange:
    """The values of one flag (by dest) the engine accepts."""

    dest: str
    minimum: float
    maximum: float | None = None
    #: True for `minimum < x` (vLLM's `gt=0`), False for `minimum <= x`
    above_minimum: bool = False
    #: how the engine reads the text: a plain number, or vLLM's human-readable int
    parse: Literal["number", "human_int"] = "number"
    #: spellings taken as they are (vLLM's "auto" / -1 for an automatic length)
    special: tuple[str, ...] = ()
    #: where the engine checks it
    source: str = ""

    def problem(self, text: str) -> str | None:
        """Why the engine would refuse `text`, or None."""
        if text.strip() in self.special:
            return None
        try:
            value = human_int(text) if self.parse == "human_int" else float(text)
        except ValueError:
            wanted = "a whole number such as 32768 or 32K" if self.parse == "human_int" else "a number"
            return f"{text!r} is not {wanted}"
        low_ok = value > self.minimum if self.above_minimum else value >= self.minimum
        if math.isfinite(value) and low_ok and (self.maximum is None or value <= self.maximum):
            return None
        return f"{text!r} is outside {self.describe()}"

    def describe(self) -> str:
        low = f"{self.minimum:g} < x" if self.above_minimum else f"x >= {self.minimum:g}"
        if self.maximum is None:
            return low
        return f"{self.minimum:g} {'<' if self.above_minimum else '<='} x <= {self.maximum:g}"
