"""Every engine specpilot knows: the list of their adapters (`engines/adapter.py`).

`check`, `plan`, `launch` and the CLI look an engine up here instead of importing its
modules by name; a third engine is one more adapter in `ENGINES` (and its planner in
`specpilot.plan.planners`).
"""

from __future__ import annotations

from functools import cache

from packaging.version import Version

from specpilot.engines.adapter import Engine, EngineRelease
from specpilot.engines.flags import ReleaseTable, parse_version, table_among
from specpilot.engines.sglang.adapter import ENGINE as SGLANG
from specpilot.engines.vllm.adapter import ENGINE as VLLM
from specpilot.errors import UserError

ENGINES: tuple[Engine, ...] = (SGLANG, VLLM)
#: the engine objects are exported too: code that is one engine's (its planner, its plans'
#: details, the vllm-cpu demo) names it by its object, never by a string
__all__ = [
    "ENGINES", "SGLANG", "VLLM", "engine_by_name", "engine_names", "engine_release", "release_tables",
    "spoken_names", "table_for",
]  # fmt: skip


def engine_names() -> tuple[str, ...]:
    return tuple(engine.name for engine in ENGINES)


def spoken_names(names: tuple[str, ...], quote: str) -> str:
    """`"a", "b" or "c"`: the names as one phrase."""
    quoted = [f"{quote}{name}{quote}" for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def engine_by_name(name: str) -> Engine:
    """The engine called `name`; an unknown name is the spec's error."""
    for engine in ENGINES:
        if engine.name == name:
            return engine
    fix = "use " + spoken_names(engine_names(), '"')
    raise UserError(f"unknown engine {name!r}", field="[engine] name", fix=fix)


def engine_release(name: str, version: str) -> EngineRelease:
    """Release `version` of engine `name`, read with its flag table: resolved once per pair."""
    return _resolved(engine_by_name(name), version)


@cache
def _resolved(engine: Engine, version: str) -> EngineRelease:
    parsed = parse_version(version)
    return EngineRelease(engine, version, parsed, table_among(engine.release_tables(), parsed))


def release_tables(engine: str) -> tuple[ReleaseTable, ...]:
    """All shipped tables of a registered engine, oldest first."""
    return engine_by_name(engine).release_tables()


def table_for(engine: str, version: Version) -> ReleaseTable:
    """The newest shipped table of a release line at or below `version` (the oldest one below the first).

    Compared by release number, so "0.5.13" finds the 0.5.13.post1 table.
    """
    return table_among(release_tables(engine), version)
