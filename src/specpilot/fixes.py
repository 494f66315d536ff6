"""What to change so a problem goes away: one vocabulary for check, plan and launch.

Check findings, plan problems and launch failures all end in the same advice (flags
to set, environment to set, flags/variables to drop, and for a launch a sentence),
so `--json` of `check`, `plan` and `up` speak one shape: `args` and `env` always,
`remove_args`, `remove_env` and `text` only when there is something to say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fix:
    """Concrete changes that resolve a problem.

    `args` replace the value of the same flag when it is already given; `remove_args`
    and `remove_env` name flags/variables to delete; `text` says it in words where the
    flags alone are not the whole story (a launch failure's remedy).
    """

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    remove_args: tuple[str, ...] = ()
    remove_env: tuple[str, ...] = ()
    text: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"args": list(self.args), "env": dict(self.env)}
        if self.remove_args:
            out["remove_args"] = list(self.remove_args)
        if self.remove_env:
            out["remove_env"] = list(self.remove_env)
        if self.text is not None:
            out["text"] = self.text
        return out
