"""Option types that refuse values a command cannot use, as click usage errors (exit 2).

`float("nan")` passes click's range checks (every comparison with NaN is false), so
`--temperature nan` would be sent as invalid JSON and `--give-up-after-s nan` would
never give up; an empty path (`--output ""`) would silently mean the current folder.
"""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.FloatRange):
    """A finite float, optionally within [min, max]."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number; give a plain number such as 0.6", param, ctx)
        return number


class NonEmptyPath(click.Path):
    """A path that is not the empty string."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; give a path, e.g. out/ (use . for the current folder)", param, ctx)
        return super().convert(value, param, ctx)
