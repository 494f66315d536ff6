"""What to change so a problem goes away: one vocabulary for check, plan and launch.

Check findings, plan problems and launch failures all end in the same advice (flags
to set, environment to set, flags/variables to drop, and for a launch a sentence),
so `--json` of `check`, `plan` and `up` speak one shape: `args` and `env` always,
`remove_args`, `remove_env` and `text` only when there is something to say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specpilot.engines.argv import FlagUse, ReadArgv, read_argv, resolve
from specpilot.engines.flags import FlagInfo, ReleaseTable
from specpilot.secrets import mask_argv, mask_env


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

    def shown(self) -> Fix:
        """The fix to print or store: a secret's value (`--api-key sk-...` for a mistyped
        `--api-kye`, an HF_TOKEN to set) masked."""
        return replace(self, args=tuple(mask_argv(self.args)), env=mask_env(self.env))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fix:
        """The fix `to_json` wrote."""
        return cls(
            args=tuple(data["args"]),
            env=dict(data["env"]),
            remove_args=tuple(data.get("remove_args", ())),
            remove_env=tuple(data.get("remove_env", ())),
            text=data.get("text"),
        )

    def describe(self) -> str:
        """The fix in one line, every part of it: `--a 1; VAR=x; drop --b; drop OLD_VAR; words`.

        Flags removed alongside new ones are what those replace (a rename, a typo), so they
        read `--a 1 in place of --b`: "drop" is said only of a flag that goes for good."""
        replaced = " in place of " + ", ".join(self.remove_args) if self.args and self.remove_args else ""
        # a secret's value (`--api-key sk-...` for a mistyped `--api-kye`) shows as ***
        parts = [" ".join(mask_argv(self.args)) + replaced]
        parts += [f"{k}={v}" for k, v in mask_env(self.env).items()]
        parts += [f"drop {name}" for name in (*(() if replaced else self.remove_args), *self.remove_env)]
        parts.append(self.text or "")
        return "; ".join(p for p in parts if p)

    def apply(
        self, table: ReleaseTable, argv: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """argv and env with the fix made: removed flags (any spelling of the same flag) and
        variables gone, each flag of `args` replacing every earlier use of the same flag."""
        gone = [resolve(table, spelling) for spelling in self.remove_args]
        new_argv = read_argv(table, list(argv)).without(lambda old: any(_same(old, s, f) for s, f in gone))
        for new in read_argv(table, list(self.args)).uses:
            new_argv = _without_flag(read_argv(table, new_argv), new) + list(self.args[new.start : new.stop])
        new_env = {k: v for k, v in env.items() if k not in self.remove_env}
        new_env.update(self.env)
        return new_argv, new_env


def _without_flag(read: ReadArgv, new: FlagUse) -> list[str]:
    return read.without(lambda old: _same(old, new.typed, new.flag))


def _same(use: FlagUse, spelling: str, flag: FlagInfo | None) -> bool:
    """`use` is the flag `flag` (any spelling), or the same unknown spelling."""
    if flag is not None and use.flag is not None:
        return use.flag.dest == flag.dest
    return use.typed == spelling
