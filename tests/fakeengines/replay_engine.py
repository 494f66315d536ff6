"""A stand-in that replays a real engine log, chosen by the flags it was started with.

    SPECPILOT_REPLAY_LOGS="0.95=/path/a.log;0.93=/path/b.log" python replay_engine.py ... \
        --mem-fraction-static 0.95 --port P

The log whose key equals the `--mem-fraction-static` value is printed line by line (the
engine's own lines, timestamps included; header lines starting with '#' are not the engine's
and are skipped). A log that reached ready is printed up to its ready line (what followed was
the recording's own request and shutdown), then /health is served on the port; any other log
is printed whole and ends as the engine did: exit 1. Used where the real engine needs a GPU (tests of `up --replan`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_engine import _parse_args, _serve

READY = "The server is fired up and ready to roll"


def _chosen_log(argv: list[str]) -> Path:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--mem-fraction-static", default="default")
    fraction = parser.parse_known_args(argv)[0].mem_fraction_static
    logs = dict(item.split("=", 1) for item in os.environ["SPECPILOT_REPLAY_LOGS"].split(";"))
    return Path(logs[fraction])


def main() -> None:
    args = _parse_args(sys.argv[1:])
    lines = [line for line in _chosen_log(sys.argv[1:]).read_text().splitlines() if not line.startswith("#")]
    server = None
    for line in lines:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        if READY in line:
            server = _serve(args.host, args.port, args.served_model_name or args.model)
            break
        time.sleep(0.002)
    if server is None:
        os._exit(1)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
