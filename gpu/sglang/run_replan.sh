#!/usr/bin/env bash
# ON the H200 machine: `specpilot up --replan 1` against a real SGLang on a card with less free
# memory than its spec says (another process holds 10 GiB of a 95.6 GiB card, as a second tenant
# would). The spec carries the plan's own recommendation for the 95.6 GiB card; the engine then
# gets far fewer KV tokens than planned, `up` re-plans from the numbers it printed and starts
# again. Outputs in $OUT: up.json, the spec, both engine logs.
#   bash gpu/sglang/run_replan.sh CARRY_DIR WHEELS_DIR
# WHEELS_DIR: specpilot's dependencies the image lacks (tomli_w, asyncssh, cryptography).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
source gpu/sglang/env.sh "$1" || exit $?
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/specpilot-site "$2"/*.whl || exit 5
export PYTHONPATH="$PWD/src:/tmp/specpilot-site:$PYTHONPATH"
out=${OUT:-/tmp/replan-out}; mkdir -p "$out"
release=$(python3 -c 'import importlib.metadata as m; print(m.version("sglang"))')
specpilot() { python3 -c 'from specpilot.cli import main; main()' "$@"; }

spec_for() { # flags... -> the spec on stdout
    python3 - "$release" "$PWD" "$@" <<'PY'
import json, os, sys
release, repo, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
keep = ("PYTHONPATH", "PATH", "CUDA_HOME", "SGLANG_ENABLE_JIT_DEEPGEMM", "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE", "PYTHONUNBUFFERED", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS")
env = {k: os.environ[k] for k in keep} | {"CUDA_VISIBLE_DEVICES": "0"}
base = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
        "--sampling-backend", "pytorch", "--grammar-backend", "none", "--mm-attention-backend", "triton_attn",
        "--context-length", "32768", "--disable-cuda-graph"]
print(f'''name = "replan-e2e"
[model]
path = "{repo}/gpu/models/qwen3.6-27b"
[gpu]
name = "H200 as a 95.6 GiB card"
memory_gib = 95.6
[engine]
name = "sglang"
version = "{release}"
command = ["python3", "{repo}/gpu/sglang/launch.py"]
args = {json.dumps(base + flags)}
env = {{ {", ".join(f'{k} = {json.dumps(v)}' for k, v in env.items())} }}
[server]
port = 30000
ready_timeout_s = 400
[host]
target = "local"''')
PY
}

spec_for > /tmp/replan-plain.toml
flags=$(specpilot plan /tmp/replan-plain.toml --json | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["recommended_args"]))')
echo "the plan's recommendation for the 95.6 GiB card: $flags"
# shellcheck disable=SC2086  # the recommended flags, one word each
spec_for $flags > "$out/replan-e2e.toml"
blocker=$(start_blocker 0 85.6 /tmp/replan-blocker.out)
for _ in $(seq 1 120); do grep -q BLOCKER_READY /tmp/replan-blocker.out 2>/dev/null && break; sleep 0.5; done
head -n 1 /tmp/replan-blocker.out
specpilot up "$out/replan-e2e.toml" --replan 1 --json > "$out/up.json"
echo "up exit $?"
cp ~/.specpilot/runs/replan-e2e/engine.log "$out/engine-after-replan.log" 2>/dev/null
cp ~/.specpilot/runs/replan-e2e/engine.log.1 "$out/engine-first.log" 2>/dev/null
specpilot down replan-e2e
kill "$blocker" 2>/dev/null
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["phase"], d["allocations"], json.dumps(d["replans"], indent=1))' "$out/up.json"
