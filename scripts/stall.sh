#!/usr/bin/env bash
# Usage: scripts/stall.sh [--sessions K] [--idle-secs S] [--duration D] [--rate R]
#                         [--server-bin PATH] [--load-bin PATH] [--server-cpu N]
#                         [--load-cpu N] [--out DIR] [--no-build]
#
# The stall probe of issue 40 item 6: how long one core's event loop stops answering while it
# holds K idle legacy sessions (the session reaper's ticks, and the expiries themselves).
# One release server (--threads 1, --max-sessions-per-core K + 1000, pinned to --server-cpu)
# and tidemark-load (pinned to --load-cpu):
#   1. baseline: `ping` at a fixed --rate on one connection for --duration, no idle session;
#   2. `tidemark-load sessions` opens K idle sessions (and leaves them);
#   3. the same `ping` run again, long enough to span many reaper ticks (every 250 ms).
# With --idle-secs S the server runs --session-idle-secs S: pick S longer than opening the K
# sessions takes and shorter than that plus --duration, so the expiries fall inside run 3 (the
# probe's own session stays busy). Latency is from the schedule (open loop, corrected for
# coordinated omission), so a stall shows in full in the max and in the tail.
#
# Prints, per run, `stall: <label> sessions <k> p50 <µs> p99.9 <µs> max <µs>`, then
#   stall: above-baseline p99.9 <µs> max <µs>
# (run 3 minus run 1). The server's own view, with a binary that has it: the histogram
# tidemark_reaper_step_seconds (how long each reaper step held the loop) from --metrics-listen,
# printed as `reaper: steps <n> over 50us <a> over 100us <b> over 250us <c> over 1ms <d>`.
# On the shared 2-core machine other processes stall both runs alike; compare in one run,
# and read the baseline's max as the floor of what this machine can show.
#
# Flags:
#   --sessions K       idle sessions to open (default 100000)
#   --idle-secs S      --session-idle-secs of the server (default: the server's, 600)
#   --duration D       each ping run (default 20s)
#   --rate R           pings a second (default 2000)
#   --server-bin PATH  the tidemark binary (default target/release/tidemark)
#   --load-bin PATH    the tidemark-load binary (default target/release/tidemark-load)
#   --server-cpu N     CPU of the server (default 1)
#   --load-cpu N       CPU of the load generator (default 0)
#   --out DIR          output (default target/bench/stall): the runs' JSON, logs
#   --no-build         use the binaries already built
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SESSIONS=100000
IDLE_SECS=""
DURATION=20s
RATE=2000
SERVER_BIN="$ROOT/target/release/tidemark"
LOAD_BIN="$ROOT/target/release/tidemark-load"
SERVER_CPU=1
LOAD_CPU=0
OUT="$ROOT/target/bench/stall"
BUILD=1

while [ $# -gt 0 ]; do
    case "$1" in
        --sessions) SESSIONS="$2"; shift 2 ;;
        --idle-secs) IDLE_SECS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --server-bin) SERVER_BIN="$2"; shift 2 ;;
        --load-bin) LOAD_BIN="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "stall.sh: unknown flag $1" >&2; exit 2 ;;
    esac
done

# shellcheck source=scripts/apt-lib.sh
. "$ROOT/scripts/apt-lib.sh"
# shellcheck source=scripts/server-lib.sh
. "$ROOT/scripts/server-lib.sh"
missing=()
command -v jq >/dev/null || missing+=(jq)
command -v curl >/dev/null || missing+=(curl)
[ ${#missing[@]} = 0 ] || apt_install stall.sh "${missing[@]}"

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi
mkdir -p "$OUT"
pin_cpus "$SERVER_CPU" "$LOAD_CPU"

METRICS_PORT=$((20000 + RANDOM % 20000))
args=(--listen 127.0.0.1:0 --threads 1 --max-sessions-per-core "$((SESSIONS + 1000))"
      --metrics-listen "127.0.0.1:$METRICS_PORT")
[ -z "$IDLE_SECS" ] || args+=(--session-idle-secs "$IDLE_SECS")
start_server "$OUT/server.log" "${PIN_SERVER[@]}" "$SERVER_BIN" "${args[@]}"

# ping_run LABEL: one fixed-rate ping run; prints its line and sets P999 and MAX (µs).
ping_run() {
    local label="$1" json="$OUT/$1.json"
    "${PIN_LOAD[@]}" "$LOAD_BIN" ping --url "$SERVER_URL" --connections 1 --rate "$RATE" \
        --warmup 1s --duration "$DURATION" --quiet --json "$json" >"$OUT/$label.log" 2>&1
    local series='.latency[0]'
    P999="$(jq "$series.p999_us" "$json")"
    MAX="$(jq "$series.max_us" "$json")"
    local errors
    errors="$(jq '[.counters // {} | to_entries[] | select(.key | test("error|timeout")) | .value] | add // 0' "$json")"
    echo "stall: $label sessions $2 p50 $(jq "$series.p50_us" "$json") p99.9 $P999 max $MAX errors $errors"
}

ping_run baseline 0
base_p999="$P999" base_max="$MAX"
"${PIN_LOAD[@]}" "$LOAD_BIN" sessions --url "$SERVER_URL" --sessions "$SESSIONS" --quiet \
    --server-pid "$SERVER_PID" --json "$OUT/sessions.json" >"$OUT/sessions.log" 2>&1
echo "stall: opened $(jq '.values.sessions_opened' "$OUT/sessions.json") sessions in" \
     "$(jq '.measured_s' "$OUT/sessions.json") s"
ping_run idle "$SESSIONS"
echo "stall: above-baseline p99.9 $(jq -n "$P999 - $base_p999") max $(jq -n "$MAX - $base_max")"

metrics="$(curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" || true)"
bucket() {
    printf '%s\n' "$metrics" | awk -v le="$1" \
        '$1 == "tidemark_reaper_step_seconds_bucket{le=\"" le "\"}" { print $2 }'
}
if printf '%s\n' "$metrics" | grep -q '^tidemark_reaper_step_seconds_count'; then
    steps="$(printf '%s\n' "$metrics" | awk '$1 == "tidemark_reaper_step_seconds_count" { print $2 }')"
    echo "reaper: steps $steps over 50us $((steps - $(bucket 0.00005))) over 100us" \
         "$((steps - $(bucket 0.0001))) over 250us $((steps - $(bucket 0.00025))) over 1ms" \
         "$((steps - $(bucket 0.001)))"
fi
expired="$(printf '%s\n' "$metrics" | awk '$1 == "tidemark_sessions_expired_total" { print $2 }')"
echo "stall: sessions expired ${expired:-?}"
