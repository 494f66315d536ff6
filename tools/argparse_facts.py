"""What both extractors read off an engine's argparse actions: the value kind and a JSON default.

The extractors run inside the engine's own environment (`python tools/extract_*.py`), where this
folder is first on sys.path, so they import this module by its plain name.
"""

from __future__ import annotations

import argparse


def action_kind(action: argparse.Action, *, detect_json: bool) -> str:
    """The FlagDef kind of an argparse action, from what argparse will do with its value.

    `detect_json`: a `json.loads` type means JSON (SGLang); vLLM's tables were extracted
    without it and its JSON flags are typed in the planner's own table instead."""
    if action.nargs == 0:
        return "bool"
    if action.nargs in ("*", "+") or isinstance(action.nargs, int):
        return "list"
    if action.type is int:
        return "int"
    if action.type is float:
        return "float"
    if detect_json and getattr(action.type, "__name__", "") in ("loads", "json_loads"):
        return "json"
    return "str"


def jsonable(value: object) -> object:
    """A default as JSON can hold it (enums, paths and other objects as their str)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


def choices(action: argparse.Action) -> list[str] | None:
    """The accepted values as strings; a set's in sorted order, so two extractions write the same table."""
    if not action.choices:
        return None
    values = [str(c) for c in action.choices]
    return sorted(values) if isinstance(action.choices, set | frozenset) else values
