#!/usr/bin/env bash
# ON the H200 machine: specpilot up / generate / export / bench on a real SGLang, measured against
# SGLang's own benchmark (gpu/sglang/job.py says what each step does and what comes back).
#   bash gpu/sglang/run_job.sh CARRY_DIR WHEELS_DIR [--budget-s S] [--steps model,plain,mtp,bench,edge]
# WHEELS_DIR: specpilot's dependencies the image lacks (tomli_w, asyncssh, cryptography).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
: "${OUT:?set OUT to the folder results go to}"
source gpu/sglang/env.sh "$1" || exit $?
shift
[[ -f /tmp/specpilot-site/.installed ]] || {
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/specpilot-site "$1"/*.whl || exit 5
    touch /tmp/specpilot-site/.installed
}
shift
export PYTHONPATH="$PWD/src:/tmp/specpilot-site:$PYTHONPATH"
mkdir -p "$OUT"
python3 gpu/sglang/job.py "$@" 2>&1 | tee -a "$OUT/job.log"
