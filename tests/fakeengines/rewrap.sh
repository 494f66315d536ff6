#!/usr/bin/env bash
# A wrapper that re-execs the engine with other flags than it was given: the argv
# verification must catch that the live process is not the planned one.
# $1: the python to run the stand-in with (one that has aiohttp).
here="$(cd "$(dirname "$0")" && pwd)"
python="$1"
shift
exec "$python" "$here/standin.py" "$@" --mem-fraction-static 0.95
