"""The flags an engine runs with, as `check`'s rules evaluate them: what the planner reads.

`check` applies a release's defaults, the flags as typed and every `adjusts` rule in the
engine's order; the resulting values are the one model of the engine's settings. The
planner reads them through `EffectiveArgs` and resolves nothing of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specpilot.check.types import CheckResult
from specpilot.engines.adapter import EngineRelease


@dataclass(frozen=True)
class EffectiveArgs:
    """Every flag's effective value (release default, as given, or as the engine adjusts it)."""

    engine: str
    version: str
    values: Mapping[str, object]
    #: the fields the user set
    given_fields: frozenset[str]
    env: Mapping[str, str]
    #: the release the values are of: a planner that evaluates a variant of the flags reads it
    release: EngineRelease = field(compare=False, repr=False)

    @classmethod
    def from_result(cls, result: CheckResult, release: EngineRelease) -> EffectiveArgs:
        """`check`'s values of `release`, under the field names the server reads."""
        rename = release.engine.field_of_dest
        values = {rename.get(dest, dest): value for dest, value in result.effective_values.items()}
        given = frozenset(rename.get(dest, dest) for dest in result.given)
        return cls(result.engine, result.version, values, given, dict(result.effective_env), release)

    def get(self, name: str, default: object = None) -> object:
        value = self.values.get(name)
        return default if value is None else value

    def given(self, name: str) -> bool:
        return name in self.given_fields

    def get_int(self, name: str) -> int | None:
        value = self.values.get(name)
        return None if value is None else int(value)  # type: ignore[call-overload]

    def get_float(self, name: str) -> float | None:
        value = self.values.get(name)
        return None if value is None else float(value)  # type: ignore[arg-type]

    def get_str(self, name: str) -> str | None:
        value = self.values.get(name)
        return None if value is None else str(value)

    def get_bool(self, name: str) -> bool:
        return bool(self.values.get(name, False))
