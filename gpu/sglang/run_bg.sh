#!/usr/bin/env bash
# ON the H200 machine, where each command is cut at 600 s but a process in its own session lives
# until the machine goes back: run_job.sh detached, from a copy of the checkout later commands do
# not overwrite, and each command waits on it and brings back what it has so far.
#   bash gpu/sglang/run_bg.sh start CARRY_DIR WHEELS_DIR [job.py args]   (then waits, as `wait`)
#   bash gpu/sglang/run_bg.sh wait [SECONDS]                              (default 560)
# Everything lands under $OUT: console.log, results.json, job-logs.tar.gz, rc once it ended.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
: "${OUT:?set OUT to the folder results go to}"
BG=${SPECPILOT_BG:-/root/specpilot-bg}
WAIT_S=560
case "${1:-}" in
  start)
    shift
    [[ -e "$BG/pid" ]] && { echo "already started: $BG/pid" >&2; exit 2; }
    mkdir -p "$BG/out" && cp -a . "$BG/repo" || exit 2
    ( cd "$BG/repo" && OUT="$BG/out" setsid nohup bash -c \
        'bash gpu/sglang/run_job.sh "$@"; echo $? > "$0/rc"' "$BG" "$@" \
        > "$BG/console.log" 2>&1 < /dev/null & echo $! > "$BG/pid" ) ;;
  wait) WAIT_S=${2:-560} ;;
  *) echo "usage: run_bg.sh start CARRY WHEELS [args] | wait [SECONDS]" >&2; exit 2 ;;
esac
deadline=$((SECONDS + WAIT_S)); shown=0
while (( SECONDS < deadline )) && [[ ! -e "$BG/rc" ]]; do
  sleep 5
  lines=$(wc -l < "$BG/console.log"); (( lines > shown )) && sed -n "$((shown + 1)),${lines}p" "$BG/console.log"; shown=$lines
done
sed -n "$((shown + 1)),\$p" "$BG/console.log"
cp -a "$BG/console.log" "$BG"/out/. "$OUT"/ 2>/dev/null
[[ -e "$BG/rc" ]] && { echo "ended: rc $(cat "$BG/rc")"; cp "$BG/rc" "$OUT/"; } || echo "still running"
exit 0
