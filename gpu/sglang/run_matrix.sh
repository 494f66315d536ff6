#!/usr/bin/env bash
# Runs ON the H200 machine, from the repository root: real SGLang starts
# with random weights, one lane per GPU, each start on an emulated card, every startup log kept.
#
#   bash gpu/sglang/run_matrix.sh CARRY_DIR MATRIX_TSV [--budget-s S] [--only ID,ID]
#   bash gpu/sglang/run_matrix.sh --dry-run MATRIX_TSV      (prints the starts; no GPU, no carry)
#
# CARRY_DIR holds sglcarry.tar.xz.part-NN and ARCHIVE_SHA256 (gpu/sglang/build_carry.sh); it is
# joined, checked and unpacked once per machine into /root/sglang-<sha>/. MATRIX_TSV rows:
#   id  model(folder under gpu/models)  card_gib(- = the whole card)  est_s  env(- or A=1,B=2)  sglang flags...
# Each lane (GPU) takes the next row; a row starts only if its estimate fits the time left.
# LANE_GPUS=N (default 1) gives each lane N GPUs for tensor-parallel rows (--tp N, whole cards
# only: card_gib must be -): a host with G GPUs runs G / N lanes.
# A start: hold the memory above card_gib in another process on that GPU, start SGLang, wait for
# ready (or exit, or the budget), send one token-id request, stop the server's process group,
# release the card. Logs, the resolved ServerArgs and outcomes end in one file,
# $OUT/sglang-logs.tar.gz when OUT is set, written before the budget ends.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

readonly BASE_PORT=30000
readonly STOP_GRACE_S=20
readonly TAR_RESERVE_S=25
# What the carry leaves out: FA3 (triton attention), flashinfer's sampler, xgrammar's library,
# the tokenizer (token-id requests), the checkpoint (dummy weights). gpu/sglang/README.md.
readonly BASE_FLAGS=(--load-format dummy --skip-tokenizer-init --attention-backend triton
    --sampling-backend pytorch --grammar-backend none --mm-attention-backend triton_attn
    --host 127.0.0.1)

budget_s=540
only=""
dry_run=0
if [[ ${1:-} == --dry-run ]]; then dry_run=1; shift; carry=""; else carry=${1:?carry dir}; shift; fi
matrix=${1:?matrix tsv}; shift
while (($#)); do
    case $1 in
        --budget-s) budget_s=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

say() { printf '[sglang-matrix %4ds] %s\n' "$SECONDS" "$*"; }

rows() {
    local line id
    while IFS= read -r line; do
        [[ -z $line || $line == \#* ]] && continue
        id=${line%%$'\t'*}
        if [[ -n $only && ",$only," != *",$id,"* ]]; then continue; fi
        printf '%s\n' "$line"
    done < "$matrix"
}

if ((dry_run)); then
    rows | while IFS=$'\t' read -r id model card est env flags; do
        printf '%-28s %-14s card %-6s est %4ss env %s  %s\n' "$id" "$model" "$card" "$est" "$env" "$flags"
    done
    exit 0
fi

source gpu/sglang/env.sh "$carry" || exit $?
python3 -c 'import importlib.metadata as m; print("sglang", m.version("sglang"), "torch", m.version("torch"))'

logs=/tmp/sglang-logs; rm -rf "$logs"; mkdir -p "$logs"
queue=/tmp/sglang-queue; rows > "$queue"; : > "$queue.taken"
readonly LANE_GPUS=${LANE_GPUS:-1}
lanes=$(($(nvidia-smi --list-gpus | wc -l) / LANE_GPUS))
((lanes >= 1)) || { echo "LANE_GPUS=$LANE_GPUS is more than this host's GPUs" >&2; exit 2; }
deadline=$((SECONDS + budget_s - TAR_RESERVE_S))
say "$(wc -l < "$queue") starts, $lanes lane(s), budget ${budget_s}s"

# The next row not yet taken whose estimate fits the time left (flock: lanes share the queue).
take_row() {
    local line
    exec 9> "$queue.lock"; flock 9
    while IFS= read -r line; do
        grep -qxF -- "$line" "$queue.taken" && continue
        local est; est=$(cut -f4 <<< "$line")
        if ((SECONDS + est + STOP_GRACE_S <= deadline)); then
            printf '%s\n' "$line" >> "$queue.taken"; printf '%s\n' "$line"; break
        fi
    done < "$queue"
    flock -u 9
}

ready_or_done() { # pid log port  -> 0 ready, 1 exited, 2 out of time
    while :; do
        kill -0 "$1" 2>/dev/null || return 1
        if grep -q "The server is fired up and ready to roll" "$2" &&
            curl -sf -o /dev/null "http://127.0.0.1:$3/health"; then return 0; fi
        ((SECONDS >= deadline)) && return 2
        sleep 2
    done
}

one_request() { # port log
    curl -s -m 120 "http://127.0.0.1:$1/generate" -H 'Content-Type: application/json' \
        -d '{"input_ids": [1000,1001,1002,1003,1004,1005,1006,1007], "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": true}}' \
        | head -c 600 >> "$2"
    echo >> "$2"
}

run_row() { # lane line
    local gpu=$1 id model card est env flags visible
    IFS=$'\t' read -r id model card est env flags <<< "$2"
    visible=$(seq -s, $((gpu * LANE_GPUS)) $((gpu * LANE_GPUS + LANE_GPUS - 1)))
    if ((LANE_GPUS > 1)) && [[ $card != - ]]; then
        say "lane $gpu: $id skipped: an emulated card (card_gib $card) needs LANE_GPUS=1"; return
    fi
    local log=$logs/$id.log port=$((BASE_PORT + gpu * 10)) t0=$SECONDS bpid=""
    {
        echo "# specpilot gpu/sglang/run_matrix.sh start $id"
        echo "# date $(date -u +%FT%TZ) gpu $visible $(nvidia-smi -i "$visible" --query-gpu=name,memory.total,driver_version --format=csv,noheader | paste -sd';')"
        echo "# sglang $(python3 -c 'import importlib.metadata as m; print(m.version("sglang"))') card_gib $card model $model"
        echo "# env $env flags $flags"
    } > "$log"
    if [[ $card != - ]]; then
        bpid=$(start_blocker "$gpu" "$card" "$logs/$id.blocker")
        for _ in $(seq 1 120); do grep -q BLOCKER_READY "$logs/$id.blocker" 2>/dev/null && break; sleep 0.5; done
        echo "# $(head -n 1 "$logs/$id.blocker")" >> "$log"
    fi
    local -a argv envs=()
    [[ $env != - ]] && IFS=, read -r -a envs <<< "$env"
    # shellcheck disable=SC2206  # flags are space-separated by the matrix's contract
    argv=(python3 gpu/sglang/launch.py --model-path "gpu/models/$model" "${BASE_FLAGS[@]}" --port "$port" $flags)
    echo "# argv ${argv[*]}" >> "$log"
    set -m
    env "${envs[@]}" CUDA_VISIBLE_DEVICES="$visible" "${argv[@]}" >> "$log" 2>&1 < /dev/null &
    local pid=$!
    set +m
    ready_or_done "$pid" "$log" "$port"
    local outcome=$?
    case $outcome in
        0) echo "# nvidia-smi at ready: $(nvidia-smi -i "$visible" --query-gpu=memory.used,memory.total --format=csv,noheader | paste -sd';')" >> "$log"
           one_request "$port" "$log"; outcome=ready ;;
        1) outcome=exited ;;
        2) outcome=budget ;;
    esac
    kill -TERM -- "-$pid" 2>/dev/null
    for _ in $(seq 1 "$STOP_GRACE_S"); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null
    [[ -n $bpid ]] && kill "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null
    for _ in $(seq 1 30); do
        (($(nvidia-smi -i "$visible" --query-gpu=memory.used --format=csv,noheader,nounits | sort -n | tail -n 1) < 2048)) && break; sleep 1
    done
    echo "# outcome $outcome after $((SECONDS - t0)) s" >> "$log"
    printf '%s\t%s\t%s\t%s\n' "$id" "$gpu" "$outcome" "$((SECONDS - t0))" >> "$logs/outcomes.tsv"
    say "lane $gpu: $id $outcome in $((SECONDS - t0)) s"
}

lane() { # gpu
    local line
    while line=$(take_row) && [[ -n $line ]]; do run_row "$1" "$line"; done
}

for ((g = 0; g < lanes; g++)); do lane "$g" & done
wait
cat "$logs/outcomes.tsv" 2>/dev/null
for f in "$logs"/*.log; do
    echo "== $(basename "$f")"
    grep -E "avail mem=|Load weight end|Mamba Cache is allocated|KV Cache is allocated|Memory pool end|max_total_num_tokens=|CUDA graph end|capped|Error|error:" "$f" \
        | grep -v "server_args=ServerArgs" | cut -c1-260 | head -n 30
done
if [[ -n ${OUT:-} ]]; then tar -czf "$OUT/sglang-logs.tar.gz" -C "$logs" . && say "logs in \$OUT/sglang-logs.tar.gz"; fi
