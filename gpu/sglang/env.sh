#!/usr/bin/env bash
# Sourced ON the H200 machine by run_matrix.sh and run_replan.sh: install the carry once per machine
# and export what a random-weight SGLang start needs.   source gpu/sglang/env.sh CARRY_DIR
# CARRY_DIR holds sglcarry.tar.xz.part-NN and ARCHIVE_SHA256 (build_carry.sh); the archive is joined,
# checked against its sha256 and unpacked into /root/sglang-<sha>/ (a marker skips this next time).
carry=$1
sha=$(cat "$carry/ARCHIVE_SHA256")
root=/root/sglang-${sha:0:12}
if [[ ! -f $root/.installed ]]; then
    got=$(cat "$carry"/sglcarry.tar.xz.part-* | tee /tmp/sglcarry.tar.xz | sha256sum | cut -d' ' -f1)
    [[ $got == "$sha" ]] || { echo "carry sha256 $got, expected $sha: send the parts again" >&2; return 3; }
    rm -rf "$root" && mkdir -p "$root"
    tar -xJf /tmp/sglcarry.tar.xz -C "$root" || { echo "unpacking failed" >&2; return 4; }
    rm -f /tmp/sglcarry.tar.xz && touch "$root/.installed"
    echo "carry ${sha:0:12} unpacked into $root ($(du -sh "$root" | cut -f1))"
fi
export PYTHONPATH="$PWD/gpu/sglang/stubs:$root/sgl-pin:$root/sgl-site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$(dirname "$(command -v python3)"):/usr/local/cuda/bin:$PATH" CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export SGLANG_ENABLE_JIT_DEEPGEMM=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# the host's GPUs are shared: NVLink multicast stays off in every process
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# Leave free exactly what a card of card_gib total would have free before SGLang starts: card minus
# what the idle GPU already uses (read before the blocker's own CUDA context exists).
start_blocker() { # gpu card_gib outfile
    local idle_mib
    idle_mib=$(nvidia-smi -i "$1" --query-gpu=memory.used --format=csv,noheader,nounits)
    CUDA_VISIBLE_DEVICES=$1 python3 - "$2" "$idle_mib" > "$3" 2>&1 <<'PY' &
import sys, time, torch
card, idle = float(sys.argv[1]) * 2**30, float(sys.argv[2]) * 2**20
torch.empty(1, device="cuda")
free, total = torch.cuda.mem_get_info()
hold = int(free - (card - idle))
x = torch.empty(hold, dtype=torch.uint8, device="cuda")
free2, _ = torch.cuda.mem_get_info()
print(f"blocker: total {total/2**30:.3f} GiB, held {hold/2**30:.3f}, free now {free2/2**30:.3f}", flush=True)
print("BLOCKER_READY", flush=True)
time.sleep(10**6)
PY
    echo $!
}
