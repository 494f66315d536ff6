#!/usr/bin/env bash
# Runs ON the H200 machine, from the repository root; results go under the folder $OUT names.
#
# The same command every time (gpu/README.md): it stashes the carried part(s) found in .carry/
# outside the work tree; once all parts are stashed it joins and verifies them, unpacks the site
# (wheels installed by gpu/prepare.sh + trimmed vLLM) and starts the matrix of gpu/matrix.tsv,
# one real vLLM server at a time with dummy weights, until this run's time budget is spent.
# Rows already done on this stash are skipped, so the same command run again runs the rest.
#
# Usage: bash gpu/run_matrix.sh [--budget-s S] [--only ID[,ID...]]
#        bash gpu/run_matrix.sh --unpack-only   (stash/join/verify/unpack, then stop; no GPU)
#        bash gpu/run_matrix.sh --dry-run [--total-gib G]   (prints the matrix; no GPU needed)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

readonly STASH=${SPECPILOT_GPU_STASH:-/root/stash}
readonly SITE=$STASH/site
readonly MATRIX=gpu/matrix.tsv
readonly MAX_MODEL_LEN=8192
readonly BASE_PORT=8100
readonly STOP_GRACE_S=30
readonly INSTALL_EST_S=60
# vLLM's own flags for a start without weights or tokenizer.
readonly COMMON_ARGS=(--load-format dummy --skip-tokenizer-init --language-model-only
    --enforce-eager --max-model-len "$MAX_MODEL_LEN" --host 127.0.0.1)

budget_s=540
only=""
dry_run=0
unpack_only=0
# Total memory torch reports on the H200 (cudaMemGetInfo), measured 2026-11-29; the real run
# measures it again.
total_gib=139.8
while (($#)); do
    case $1 in
        --budget-s) budget_s=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --unpack-only) unpack_only=1; shift ;;
        --total-gib) total_gib=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

say() { printf '[matrix %4ds] %s\n' "$SECONDS" "$*"; }

# Rows of the matrix as "id model card_gib card_util est_s extra", comments dropped.
matrix_rows() {
    local id model card_gib card_util est_s extra
    while IFS=$'\t' read -r id model card_gib card_util est_s extra; do
        [[ -z $id || $id == \#* ]] && continue
        if [[ -n $only && ",$only," != *",$id,"* ]]; then continue; fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$model" "$card_gib" "$card_util" "$est_s" "$extra"
    done < "$MATRIX"
}

# --gpu-memory-utilization on the H200 that gives the engine the memory it would get on the card.
emulated_util() { # card_gib card_util total_gib
    awk -v c="$1" -v u="$2" -v t="$3" 'BEGIN { printf "%.4f", int(c * u / t * 10000) / 10000 }'
}

engine_argv() { # model util port extra
    local - argv
    set -f  # the JSON of --speculative-config must not meet pathname expansion
    argv=(python3 -m vllm.entrypoints.cli.main serve "gpu/models/$1" "${COMMON_ARGS[@]}"
        --gpu-memory-utilization "$2" --port "$3")
    # shellcheck disable=SC2206  # extra args are space-separated by the matrix's contract
    [[ $4 != - ]] && argv+=($4)
    printf '%q ' "${argv[@]}"
}

# A start is begun only if its estimate and a full stop still fit in this call's budget.
fits_budget() { # elapsed_s est_s
    (($1 + $2 + STOP_GRACE_S <= budget_s))
}

dry_run_report() {
    local id model card_gib card_util est_s extra util index=0 call=1 elapsed=$INSTALL_EST_S
    echo "matrix (${MATRIX}), H200 total ${total_gib} GiB, budget ${budget_s} s per call:"
    printf '%-14s %-12s %8s %6s %8s %8s %6s  %s\n' id model card_gib c_util target_gib h200_util est_s call
    while IFS=$'\t' read -r id model card_gib card_util est_s extra; do
        util=$(emulated_util "$card_gib" "$card_util" "$total_gib")
        if ! fits_budget "$elapsed" "$est_s"; then call=$((call + 1)); elapsed=0; fi
        elapsed=$((elapsed + est_s))
        printf '%-14s %-12s %8s %6s %8s %8s %6s  %s\n' "$id" "$model" "$card_gib" "$card_util" \
            "$(awk -v c="$card_gib" -v u="$card_util" 'BEGIN { printf "%.2f", c * u }')" \
            "$util" "$est_s" "matrix call $call"
        echo "    $(engine_argv "$model" "$util" $((BASE_PORT + index)) "$extra")"
        index=$((index + 1))
    done < <(matrix_rows)
    echo "the first matrix call also joins and unpacks the carry (~${INSTALL_EST_S} s)"
}

if ((dry_run)); then
    dry_run_report
    exit 0
fi

OUT=${OUT:?set OUT to the folder for the results (or use --dry-run)}
mkdir -p "$STASH/parts" "$STASH/logs" "$OUT"
exec > >(tee -a "$OUT/run_matrix.log") 2>&1

# --- carry: stash parts, join, verify, unpack (gpu/lib.sh) ----------------------------------

# shellcheck source=gpu/lib.sh
source gpu/lib.sh
carry_ready || exit 0
((unpack_only)) && exit 0

export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
# DEBUG adds the memory profile (initial free memory, weights, torch peak, non-torch): the
# planner's terms, which INFO does not print.
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=DEBUG
python3 -c 'import vllm, pydantic, asyncssh; print("vllm", vllm.__version__, "pydantic", pydantic.__version__)' \
    || { say "ERROR: the site does not import"; exit 1; }

# --- matrix ---------------------------------------------------------------------------------

# The server runs in its own session, which outlives this script if it is killed at a time
# limit: its group id is kept in the stash so the next run can stop it before starting another.
readonly PGID_FILE=$STASH/engine.pgid
stop_current() {
    [[ -f $PGID_FILE ]] || return 0
    stop_group "$(cat "$PGID_FILE")"
    rm -f "$PGID_FILE"
}
stop_current
trap 'stop_current' EXIT
trap 'stop_current; exit 143' TERM INT

http_ok() { # port path
    local reply=""
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
    IFS= read -r -t 5 reply <&3
    exec 3<&- 3>&-
    [[ $reply == *" 200"* ]]
} 2>/dev/null

wait_gpu_released() {
    local waited=0
    while (($(gpu_used_mib) > 2048)) && ((waited < 30)); do sleep 1; waited=$((waited + 1)); done
}

pack_results() {
    tar -czf "$OUT/engine-logs.tar.gz" -C "$STASH" logs results.tsv 2>/dev/null
    cp "$STASH/results.tsv" "$OUT/results.tsv" 2>/dev/null
}

# The lines a planner comparison needs, as vLLM prints them.
key_lines() {
    grep -aE 'Model loading took|Loading weights took|Initial free memory|Free memory after profiling|Memory profiling takes|Available KV cache memory|GPU KV cache size|Maximum concurrency|block size|page size|Error|error:' "$1" \
        | grep -avE 'DeprecationWarning' | cut -c1-300 | head -40
}

if [[ ! -f $STASH/gpu_total_bytes ]]; then
    python3 -c 'import torch; print(torch.cuda.mem_get_info()[1])' > "$STASH/gpu_total_bytes"
fi
total_bytes=$(cat "$STASH/gpu_total_bytes")
total_gib=$(awk -v b="$total_bytes" 'BEGIN { printf "%.4f", b / 2^30 }')
say "H200 total (torch): $total_bytes bytes = $total_gib GiB; budget $budget_s s"
[[ -f $STASH/results.tsv ]] || printf 'id\tmodel\tcard_gib\tcard_util\th200_util\tstatus\tready_s\treleased_s\tgpu_used_mib\n' > "$STASH/results.tsv"
touch "$STASH/done.txt"

# Seconds the last start of each model took here: a better estimate than the table's once the
# kernel caches are warm.
declare -A observed_s=()
index=0
while IFS=$'\t' read -r id model card_gib card_util est_s extra; do
    port=$((BASE_PORT + index)); index=$((index + 1))
    if grep -qx "$id" "$STASH/done.txt"; then say "$id: done in an earlier call"; continue; fi
    [[ -n ${observed_s[$model]:-} ]] && est_s=$((observed_s[$model] + 10))
    if ! fits_budget "$SECONDS" "$est_s"; then
        say "$id: left for the next call (needs ~${est_s} s, $((budget_s - SECONDS)) s left)"
        continue
    fi
    util=$(emulated_util "$card_gib" "$card_util" "$total_gib")
    log=$STASH/logs/$id.log
    argv=$(engine_argv "$model" "$util" "$port" "$extra")
    say "$id: ${card_gib} GiB card at ${card_util} -> --gpu-memory-utilization $util on the H200"
    echo "# $argv" > "$log"
    started=$SECONDS
    eval "setsid $argv >> \"\$log\" 2>&1 &"
    pid=$!
    # setsid in a non-leader child execs without forking: the server's pid is its group's id.
    echo "$pid" > "$PGID_FILE"
    deadline=$((budget_s - STOP_GRACE_S))
    status=timeout
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"; status="exited-rc$?"; break
        fi
        if http_ok "$port" /health; then status=ready; break; fi
        sleep 2
    done
    ready_s=$((SECONDS - started))
    used_mib=$(gpu_used_mib)
    if [[ $status == ready ]]; then
        nvidia-smi > "$STASH/logs/$id.nvidia-smi.txt" 2>&1
    fi
    stop_current
    wait_gpu_released
    seconds=$((SECONDS - started))
    observed_s[$model]=$seconds
    say "$id: $status after ${ready_s} s, stopped and released after ${seconds} s (GPU used: ${used_mib} MiB)"
    key_lines "$log" | sed 's/^/    /'
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$model" "$card_gib" "$card_util" "$util" \
        "$status" "$ready_s" "$seconds" "$used_mib" >> "$STASH/results.tsv"
    echo "$id" >> "$STASH/done.txt"
    pack_results
done < <(matrix_rows)

pack_results
say "results so far:"
column -t -s $'\t' "$STASH/results.tsv" 2>/dev/null || cat "$STASH/results.tsv"
remaining=$(matrix_rows | cut -f1 | grep -vxF -f "$STASH/done.txt" | tr '\n' ' ')
if [[ -n $remaining ]]; then
    say "not yet run: $remaining -- send the same command again now"
else
    say "matrix complete"
fi
