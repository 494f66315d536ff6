"""Every `plan --json` (and `check --json`) the repository can produce from its own specs, in one
file, so that a refactor can show it changed no number.

    python3 tools/plan_snapshot.py --write /tmp/before.json     # on the old commit
    python3 tools/plan_snapshot.py --compare /tmp/before.json   # on the new one: exit 1 on any change

The specs: examples/, tests/data/ (with `--from-log` where a start's log lies beside its spec)
and gpu/specs/. Each spec is also planned at two other card sizes (`--gpu-memory-gib`), where the
recommendation moves, and planned and checked at each of its engine's release eras.
Runs in-process (click's runner) against this checkout's src/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from click.testing import CliRunner  # noqa: E402

from specpilot.cli import cli  # noqa: E402

CARD_SIZES_GIB = ("80", "141")
#: releases each engine's specs are also planned and checked at: every release row and rule era
RELEASES = {
    "sglang": ("0.5.10.post1", "0.5.12", "0.5.13.post1", "0.5.14", "0.5.17", "0.5.19", "0.5.23", "0.5.24"),
    "vllm": ("0.21.0", "0.26.0", "0.32.0", "0.33.0", "0.39.0", "0.40.0"),
}


def specs() -> list[Path]:
    patterns = ("examples/*.toml", "tests/data/**/*.toml", "gpu/specs/*.toml")
    found = [path for pattern in patterns for path in REPO.glob(pattern)]
    return sorted(p for p in found if "fleet" not in p.name)


def commands(spec: Path) -> list[list[str]]:
    shown = str(spec.relative_to(REPO))
    out = [["plan", shown, "--json"], ["check", shown, "--json"]]
    out += [["plan", shown, "--json", "--gpu-memory-gib", size] for size in CARD_SIZES_GIB]
    engine = tomllib.loads(spec.read_text()).get("engine", {}).get("name", "")
    for release in RELEASES.get(engine, ()):
        out += [[verb, shown, "--json", "--engine-version", release] for verb in ("plan", "check")]
    log = spec.with_suffix(".log")
    if log.exists():
        out.append(["plan", shown, "--json", "--from-log", str(log.relative_to(REPO))])
    return out


def snapshot() -> dict[str, dict[str, object]]:
    runner = CliRunner()
    taken: dict[str, dict[str, object]] = {}
    for spec in specs():
        for argv in commands(spec):
            result = runner.invoke(cli, argv, catch_exceptions=False)
            taken[" ".join(argv)] = {"exit": result.exit_code, "output": result.output}
    return taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path)
    group.add_argument("--compare", type=Path)
    args = parser.parse_args()
    os.chdir(REPO)  # the specs name their model folders relative to the checkout
    taken = snapshot()
    if args.write:
        args.write.write_text(json.dumps(taken, indent=1, sort_keys=True))
        print(f"{len(taken)} outputs written to {args.write}")
        return 0
    before = json.loads(args.compare.read_text())
    changed = sorted(k for k in before.keys() | taken.keys() if before.get(k) != taken.get(k))
    for key in changed:
        print(f"changed: {key}")
    print(f"{len(taken)} outputs, {len(changed)} changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
