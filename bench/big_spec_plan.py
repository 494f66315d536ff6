"""How `plan` scales with a huge `[engine] args` (a 2 MB spec once planned for 11-24 s with no
output): reading the argv with the prefix lookup per use (as before) and per distinct
option (now), side by side, then a whole `make_plan`. Prints numbers; asserts nothing.

PYTHONPATH=src python bench/big_spec_plan.py
"""

from __future__ import annotations

import time
from pathlib import Path

from specpilot.check.resolved import resolve
from specpilot.engines import argv as argv_module
from specpilot.engines.flags import parse_version
from specpilot.engines.registry import table_for
from specpilot.plan import make_plan
from specpilot.spec import load_spec

EXAMPLE = Path(__file__).parents[1] / "examples" / "qwen36-27b-mtp-sglang.toml"


def main() -> None:
    table = table_for("sglang", parse_version("0.5.13"))
    for repeats in (1_000, 10_000, 50_000):
        args = ["--tp", "1"] * repeats
        start = time.perf_counter()
        [argv_module.resolve(table, token) for token in args if token.startswith("-")]
        per_use_s = time.perf_counter() - start
        start = time.perf_counter()
        argv_module.read_argv(table, args)
        now_s = time.perf_counter() - start
        print(
            f"{repeats * 2:>7} args: prefix lookup per use {per_use_s:7.3f} s, read_argv now {now_s:7.3f} s"
        )
    spec = load_spec(EXAMPLE)
    big = spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": ("--tp", "1") * 20_000})})
    start = time.perf_counter()
    make_plan(resolve(big))
    print(f"make_plan with 40,000 args: {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
