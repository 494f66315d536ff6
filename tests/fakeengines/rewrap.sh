#!/usr/bin/env bash
# A wrapper that re-execs the engine with other flags than it was given: the argv
# verification must catch that the live process is not the planned one.
here="$(cd "$(dirname "$0")" && pwd)"
exec python3 "$here/fake_engine.py" "$@" --mem-fraction-static 0.95
