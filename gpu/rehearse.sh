#!/usr/bin/env bash
# Rehearse the one-part-per-command sequence of gpu/README.md here, without a GPU: run_matrix.sh
# against the real .carry/ (built by gpu/prepare.sh), each part sent with its own command into a
# copy of the repo, with stand-ins for what only the H200 has: a python3 that fakes `vllm serve`
# (prints engine-like lines, answers /health; refuses MTP below util 0.55 to exercise the failure
# path), torch's memory total, and nvidia-smi. Everything else (stash, sha256, join, unpack,
# process groups, budget split across commands, $OUT packing) is the real script.
# Usage: bash gpu/rehearse.sh    (exit 0 when every check passed)
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
[[ -f $repo/.carry/SHA256SUMS ]] || { echo "run gpu/prepare.sh first" >&2; exit 2; }
work=$(mktemp -d /tmp/specpilot-gpu-rehearsal.XXXXXX)
trap 'rm -rf "$work"' EXIT
real_python=$(command -v python3)

mkdir -p "$work/bin" "$work/repo" "$work/out"
cp -r "$repo/gpu" "$work/repo/"
cat > "$work/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
[[ $* == *memory.used* ]] && echo 1000 || echo "NVIDIA H200 (stand-in)"
EOF
cat > "$work/bin/python3" <<EOF
#!/usr/bin/env bash
case "\$*" in
    *"import torch"*) echo 150110011392 ;;
    *"import vllm, pydantic, asyncssh"*) echo "vllm 0.26.0 (stand-in)" ;;
    *vllm.entrypoints.cli.main*) exec "$real_python" "$work/bin/fake_vllm.py" "\$@" ;;
    *) exec "$real_python" "\$@" ;;
esac
EOF
cat > "$work/bin/fake_vllm.py" <<'EOF'
import http.server, sys, time
args = sys.argv
port = int(args[args.index("--port") + 1])
util = float(args[args.index("--gpu-memory-utilization") + 1])
print(f"INFO Model loading took 51.2 GiB memory and 20.1 seconds (stand-in, util {util})", flush=True)
if "--speculative-config" in args and util < 0.55:
    print("ValueError: stand-in refusal: not enough memory for the draft model", flush=True)
    sys.exit(1)
print("INFO Available KV cache memory: 20.5 GiB", flush=True)
print("INFO GPU KV cache size: 123,456 tokens", flush=True)
time.sleep(1)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
EOF
chmod +x "$work/bin/"*

call() { # carry-part-or-none, args...
    local part=$1; shift
    rm -rf "$work/repo/.carry" "$work/out" && mkdir -p "$work/repo/.carry" "$work/out"
    if [[ $part != none ]]; then
        cp "$repo/.carry/$part" "$repo/.carry/SHA256SUMS" "$repo/.carry/manifest.json" "$work/repo/.carry/"
    fi
    echo "=== command: part $part, args: $*"
    PATH=$work/bin:$PATH OUT=$work/out SPECPILOT_GPU_STASH=$work/stash \
        bash "$work/repo/gpu/run_matrix.sh" "$@"
}

fail() { echo "REHEARSAL FAILED: $*" >&2; exit 1; }

parts=$(awk '{print $2}' "$repo/.carry/SHA256SUMS")
last=$(tail -1 <<< "$parts")
for part in $parts; do
    if [[ $part == "$last" ]]; then
        # Too little budget for any start: everything must be left for the next call.
        call "$part" --budget-s 60 | tee "$work/call.log"
        grep -q "left for the next call" "$work/call.log" || fail "budget did not defer the starts"
    else
        call "$part" | tee "$work/call.log"
        grep -q "waiting for:" "$work/call.log" || fail "an early call did not wait for the rest"
    fi
done
# A run killed at a time limit leaves the server running in its own session; the next run must
# stop it before it starts another.
call none --only hybrid-96 > "$work/killed.log" 2>&1 &
for _ in $(seq 100); do [[ -f $work/stash/engine.pgid ]] && break; sleep 0.2; done
[[ -f $work/stash/engine.pgid ]] || fail "the killed call never started its server"
# shellcheck disable=SC2046  # the ids of this rehearsal's own run_matrix.sh processes
kill -KILL $(pgrep -f "$work/repo/gpu/run_matrix.sh") 2>/dev/null || true
wait || true
orphan=$(cat "$work/stash/engine.pgid")
kill -0 "$orphan" 2>/dev/null || fail "the stand-in server should have outlived the killed call"

call none | tee "$work/call.log"
kill -0 "$orphan" 2>/dev/null && fail "the next call did not stop the orphaned server"
grep -q "matrix complete" "$work/call.log" || fail "the matrix did not complete"
[[ $(grep -c $'\tready\t' "$work/out/results.tsv") == 5 ]] || fail "expected 5 ready starts"
grep -q $'hybrid-mtp-80\t.*exited-rc1' "$work/out/results.tsv" || fail "the refusal was not recorded"
tar -tzf "$work/out/engine-logs.tar.gz" | grep -q 'logs/dense-80.log' || fail "logs not packed"
[[ -f $work/stash/site/vllm/__init__.py ]] || fail "vLLM not unpacked into the site"
[[ -d $work/stash/site/pydantic ]] || fail "pydantic not unpacked into the site"
pgrep -f "$work/bin/fake_vllm.py" >/dev/null && fail "a stand-in engine outlived its start"
echo "REHEARSAL PASSED"
