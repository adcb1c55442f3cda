#!/usr/bin/env bash
# Usage: scripts/compare.sh [--runs N] [--duration D] [--warmup D] [--connections C]
#                           [--steps N] [--server-cpu N] [--load-cpu N] [--out DIR] [--no-build]
#                           [--server-bin PATH]
#
# tidemark against the official Rust SDK: builds both in release (tidemark and tidemark-load in
# this workspace; the rmcp peer, loadtest/peer-rmcp, is its own workspace built into
# target/peer-rmcp so the server's build never compiles tokio or rmcp), then runs `echo` and
# `stream` against each server, alternating tidemark and rmcp run by run so drift on the shared
# VM hits both alike, plus the bare-HTTP `ping` baseline against tidemark, and tidemark's
# stateless 2026-07-28 echo (`modern`: no session) next to its legacy `echo`, before it in odd
# runs and after it in even ones, and tidemark's echo with authorization on (`tidemark-auth`:
# --auth-tokens on the server, a bearer token on every request) next to it, the ratio
# tidemark-auth/tidemark being what authorization costs. Each server runs one worker thread on
# --server-cpu; the load generator runs on --load-cpu (taskset).
#
# Output (default target/bench/): compare.md (medians, the tidemark/rmcp and modern/echo ratio
# tables and the echo/ping ratio, ready for docs/performance.md), compare.json, compare-echo.svg,
# compare-stream.svg, compare-runs/*.json, logs/.
#
# Flags:
#   --runs N          runs per server and scenario (default 3)
#   --duration D      measurement window per run (default 5s)
#   --warmup D        warm-up per run (default 1s)
#   --connections C   load connections for echo, modern and ping (default 64)
#   --steps N         progress events per stream call (default 1000)
#   --server-cpu N    CPU for the servers (default 0)
#   --load-cpu N      CPU for the load generator (default 1)
#   --out DIR         output directory (default target/bench)
#   --no-build        use the binaries already built
#   --server-bin PATH the tidemark binary (default target/release/tidemark)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
DURATION=5s
WARMUP=1s
CONNECTIONS=64
STEPS=1000
SERVER_CPU=0
LOAD_CPU=1
OUT="$ROOT/target/bench"
BUILD=1
SERVER_BIN_FLAG=""

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --server-bin) SERVER_BIN_FLAG="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

TIDEMARK_BIN="${SERVER_BIN_FLAG:-$ROOT/target/release/tidemark}"
LOAD_BIN="$ROOT/target/release/tidemark-load"
PEER_TARGET="$ROOT/target/peer-rmcp"
PEER_BIN="$PEER_TARGET/release/tidemark-peer-rmcp"
RUNS_DIR="$OUT/compare-runs"
mkdir -p "$RUNS_DIR" "$OUT/logs"
rm -f "$RUNS_DIR"/*.json


# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
pin_cpus "$SERVER_CPU" "$LOAD_CPU"

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
    CARGO_TARGET_DIR="$PEER_TARGET" cargo build --release --quiet \
        --manifest-path "$ROOT/loadtest/peer-rmcp/Cargo.toml"
fi


FAILED=0
# The token of the tidemark-auth runs: made up here, in a file only the server reads.
AUTH_TOKENS="$OUT/compare-auth-tokens"
AUTH_TOKEN="compare-$$-$RANDOM$RANDOM"
printf '# compare.sh: the tidemark-auth runs\n%s compare-load\n' "$AUTH_TOKEN" >"$AUTH_TOKENS"
chmod 600 "$AUTH_TOKENS"

# one SERVER SCENARIO RUN LOAD_ARGS...
one() {
    local server="$1" scenario="$2" run="$3"
    shift 3
    local log="$OUT/logs/compare-$scenario-$server-$run"
    local auth_args=()
    case "$server" in
        tidemark)
            start_server "$log.server.log" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" \
                --listen 127.0.0.1:0 --threads 1 --tools demo ;;
        tidemark-auth)
            start_server "$log.server.log" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" \
                --listen 127.0.0.1:0 --threads 1 --tools demo --auth-tokens "$AUTH_TOKENS"
            auth_args=(--bearer-token "$AUTH_TOKEN") ;;
        rmcp)
            start_server "$log.server.log" "${PIN_SERVER[@]}" "$PEER_BIN" \
                --listen 127.0.0.1:0 --threads 1 ;;
    esac
    echo "== $scenario against $server, run $run/$RUNS"
    if ! "${PIN_LOAD[@]}" "$LOAD_BIN" "$scenario" "$@" "${auth_args[@]}" --url "$SERVER_URL" --label "$server" \
        --duration "$DURATION" --warmup "$WARMUP" --quiet \
        --json "$RUNS_DIR/$scenario-$server-$run.json" >"$log.load.log" 2>&1; then
        echo "   FAILED (see $log.load.log)"
        FAILED=1
    fi
    grep -E '^  (calls|events|responses)_per_s' "$log.load.log" || tail -n 3 "$log.load.log"
    stop_server
}

for run in $(seq 1 "$RUNS"); do
    # Alternate which server goes first, so neither always runs on a warmer (or busier) box.
    if [ $((run % 2)) = 1 ]; then order=(tidemark rmcp); else order=(rmcp tidemark); fi
    # Odd runs: modern, tidemark echo, rmcp echo; even runs: rmcp echo, tidemark echo, modern.
    if [ $((run % 2)) = 1 ]; then one tidemark modern "$run" --connections "$CONNECTIONS"; fi
    for server in "${order[@]}"; do
        one "$server" echo "$run" --connections "$CONNECTIONS"
    done
    # Authorization's cost: right after tidemark's own echo in odd runs, before it in even ones.
    one tidemark-auth echo "$run" --connections "$CONNECTIONS"
    if [ $((run % 2)) = 0 ]; then one tidemark modern "$run" --connections "$CONNECTIONS"; fi
    for server in "${order[@]}"; do
        one "$server" stream "$run" --connections 16 --steps "$STEPS"
    done
    one tidemark ping "$run" --connections "$CONNECTIONS"
done

FILES=("$RUNS_DIR"/*-tidemark-*.json "$RUNS_DIR"/*-rmcp-*.json) # tidemark's rows first
"$LOAD_BIN" report --ratio tidemark/rmcp --ratio tidemark-auth/tidemark --ratio modern/echo --markdown "$OUT/compare.md.tmp" \
    --json "$OUT/compare.json" --title "tidemark vs rmcp (median runs)" "${FILES[@]}" >/dev/null
"$LOAD_BIN" plot --out "$OUT/compare-echo.svg" --title "echo: tidemark vs rmcp, every run" \
    "$RUNS_DIR"/echo-*.json "$RUNS_DIR"/modern-*.json "$RUNS_DIR"/ping-*.json
"$LOAD_BIN" plot --out "$OUT/compare-stream.svg" --title "stream: tidemark vs rmcp, every run" \
    "$RUNS_DIR"/stream-*.json

{
    echo "Machine: $(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"
    echo "$(uname -sr), $(rustc --version). Each server: 1 worker thread on CPU $SERVER_CPU;"
    echo "load generator on CPU $LOAD_CPU; $RUNS alternating run(s) of $DURATION after $WARMUP warm-up; medians."
    echo "rmcp $(grep -m1 -A1 '^name = "rmcp"$' "$ROOT/loadtest/peer-rmcp/Cargo.lock" | tail -n 1 \
        | sed 's/version = //; s/"//g' || echo '?') (streamable HTTP server, default session settings,"
    echo "TCP_NODELAY), axum + tokio multi-thread runtime with 1 worker."
    echo
    cat "$OUT/compare.md.tmp"
} >"$OUT/compare.md"
rm -f "$OUT/compare.md.tmp"
cat "$OUT/compare.md"
echo
echo "compare.sh: wrote $OUT/compare.md, compare.json, compare-echo.svg, compare-stream.svg"
exit "$FAILED"
