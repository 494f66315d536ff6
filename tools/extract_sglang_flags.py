"""Emit one SGLang release's flag table (and env-var names) as JSON facts.

Run it with the release importable (e.g. the conformance venv built by
`tests/conformance/venvs.py`), so the table is exactly what that release's own
argparse accepts:

    PYTHONPATH=$CACHE/venvs/sglang-0.5.13.post1 $CACHE/venvs/base-torch-2.13.0/bin/python \
        tools/extract_sglang_flags.py > src/specpilot/engines/sglang/flags/0.5.13.post1.json

The script asks the release's parser for its actions; it copies no engine code.
Deprecated aliases (actions that carry a `new_flag`) are recorded as renames.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version as dist_version

from argparse_facts import action_kind, choices, jsonable


def _flag_entry(action: argparse.Action) -> dict[str, object] | None:
    long_names = [s for s in action.option_strings if s.startswith("--")]
    if not long_names or action.dest == "help":
        return None
    new_flag = getattr(action, "new_flag", None)
    deprecated = new_flag is not None or type(action).__name__.startswith("Deprecated")
    return {
        "name": long_names[0],
        "aliases": [s for s in action.option_strings if s != long_names[0]],
        "dest": action.dest,
        "kind": action_kind(action, detect_json=True),
        "default": jsonable(action.default),
        "choices": choices(action),
        "deprecated": deprecated,
        "replacement": new_flag,
    }


def _env_names() -> list[str]:
    from sglang.srt import environ

    envs_cls = environ.Envs
    return sorted(name for name in vars(envs_cls) if name.startswith(("SGLANG_", "SGL_")))


def main() -> None:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags = [entry for a in parser._actions if (entry := _flag_entry(a)) is not None]
    table = {
        "engine": "sglang",
        "version": dist_version("sglang"),
        "source": "argparse actions of sglang.srt.server_args.ServerArgs.add_cli_args",
        "flags": sorted(flags, key=lambda f: str(f["name"])),
        "env": _env_names(),
    }
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
