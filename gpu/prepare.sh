#!/usr/bin/env bash
# Build .carry/ (parts of <= 56 MiB + SHA256SUMS + manifest.json) at the repo root for the H200
# machine. Idempotent: downloads and builds are cached in $SPECPILOT_GPU_CACHE.
# Usage: bash gpu/prepare.sh        (from any directory of the checkout that will be sent)
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cache=${SPECPILOT_GPU_CACHE:-$HOME/.cache/specpilot/gpu-carry}
venv=$cache/pip-venv
mkdir -p "$cache"
# A recent pip resolves from PEP 658 metadata; the system one downloads every candidate wheel.
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import packaging, pip, sys; sys.exit(int(pip.__version__.split(".")[0]) < 25)'; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip --isolated --cert /etc/ssl/certs/ca-certificates.crt \
        install --quiet --upgrade 'pip>=25' 'packaging>=24'
fi
exec "$venv/bin/python" "$repo/gpu/carry.py" --pip-python "$venv/bin/python" --cache "$cache" --repo "$repo"
