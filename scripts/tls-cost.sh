#!/usr/bin/env bash
# Usage: scripts/tls-cost.sh [--runs N] [--duration D] [--warmup D] [--connections C]
#                            [--server-cpu N] [--load-cpu N] [--out DIR] [--no-build]
#
# What TLS (--tls-cert/--tls-key) costs tidemark, per request and per connection: the same
# release binary started plain and with TLS (a P-256 certificate from a test CA made here with
# the openssl CLI), alternating plain and TLS run by run, two scenarios each:
#   echo            legacy `tools/call echo` on established sessions over keep-alive connections
#                   (calls/s: the per-request cost of the record layer)
#   modern --new-connection  a stateless 2026-07-28 echo per connection, closed after its answer
#                   (calls/s = connections/s: on TLS a full handshake each, no resumption)
# The server runs one worker thread on --server-cpu, the load generator (tidemark-load,
# --tls-ca) on --load-cpu (taskset). The load generator's side of each handshake (verifying the
# certificate chain) runs on its own CPU, so the handshake figure is what the pair sustains.
#
# Output (default target/bench/): tls-cost.md (medians, the tls/plain ratios and the server's
# CPU share in each run, ready for docs/deployment.md "TLS"), tls-cost.json, tls-cost-runs/*.json, logs/.
#
# Flags:
#   --runs N          runs per server and scenario (default 3)
#   --duration D      measurement window per run (default 5s)
#   --warmup D        warm-up per run (default 1s)
#   --connections C   load connections (default 64 for echo, 16 for new connections)
#   --server-cpu N    CPU for the server (default 0)
#   --load-cpu N      CPU for the load generator (default 1)
#   --out DIR         output directory (default target/bench)
#   --no-build        use the binaries already built
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
DURATION=5s
WARMUP=1s
CONNECTIONS=""
SERVER_CPU=0
LOAD_CPU=1
OUT="$ROOT/target/bench"
BUILD=1

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "tls-cost.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

TIDEMARK_BIN="$ROOT/target/release/tidemark"
LOAD_BIN="$ROOT/target/release/tidemark-load"
RUNS_DIR="$OUT/tls-cost-runs"
PKI="$OUT/tls-cost-pki"
mkdir -p "$RUNS_DIR" "$OUT/logs" "$PKI"
rm -f "$RUNS_DIR"/*.json

# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
# shellcheck source=scripts/test-pki.sh
source "$ROOT/scripts/test-pki.sh"
pin_cpus "$SERVER_CPU" "$LOAD_CPU"

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi

make_test_pki "$PKI" "tidemark tls-cost CA"

# cpu_ticks PID: user + system time of PID so far, in clock ticks.
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

rm -f "$OUT/tls-cost-cpu.txt"
FAILED=0
# one LABEL SCENARIO RUN LOAD_ARGS...: LABEL plain or tls.
one() {
    local label="$1" scenario="$2" run="$3"
    shift 3
    local log="$OUT/logs/tls-cost-$scenario-$label-$run" tls_flags=()
    [ "$label" = tls ] && tls_flags=(--tls-cert "$PKI/cert.pem" --tls-key "$PKI/key.pem")
    start_server "$log.server.log" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" \
        --listen 127.0.0.1:0 --threads 1 --tools demo "${tls_flags[@]}"
    echo "== $scenario $* against $label, run $run/$RUNS"
    local ticks_before ticks_after started ended
    ticks_before="$(cpu_ticks "$SERVER_PID")"
    started="$(date +%s%N)"
    if ! "${PIN_LOAD[@]}" "$LOAD_BIN" "$scenario" "$@" --url "$SERVER_URL" --label "$label" \
        --tls-ca "$PKI/ca.pem" --duration "$DURATION" --warmup "$WARMUP" --quiet \
        --json "$RUNS_DIR/$scenario-$label-$run.json" >"$log.load.log" 2>&1; then
        echo "   FAILED (see $log.load.log)"
        FAILED=1
    fi
    ended="$(date +%s%N)"
    ticks_after="$(cpu_ticks "$SERVER_PID")"
    grep -E '^  calls_per_s' "$log.load.log" || tail -n 3 "$log.load.log"
    # The server's CPU share over the whole load run (set-up and warm-up included): whether the
    # server or the load generator was the bottleneck.
    local busy
    busy="$(awk -v t=$((ticks_after - ticks_before)) -v hz="$(getconf CLK_TCK)" \
        -v ns=$((ended - started)) 'BEGIN { printf "%.0f", 100 * t / hz / (ns / 1e9) }')"
    # Server CPU per call: its CPU share over calls per second (as if the share held through
    # the measurement window).
    local calls us
    calls="$(grep -E '^  calls_per_s' "$log.load.log" | awk '{ gsub(",", "", $2); print $2 }')"
    us="$(awk -v b="$busy" -v c="${calls:-0}" 'BEGIN { if (c > 0) printf "%.1f", b * 1e4 / c; else print "-" }')"
    echo "  server_cpu_percent $busy  server_cpu_us_per_call $us"
    echo "$scenario $label $run $busy $us" >>"$OUT/tls-cost-cpu.txt"
    stop_server
}

for run in $(seq 1 "$RUNS"); do
    # Alternate which goes first, so neither always runs on a warmer (or busier) box.
    if [ $((run % 2)) = 1 ]; then order=(plain tls); else order=(tls plain); fi
    for label in "${order[@]}"; do
        one "$label" echo "$run" --connections "${CONNECTIONS:-64}"
    done
    for label in "${order[@]}"; do
        one "$label" modern "$run" --connections "${CONNECTIONS:-16}" --new-connection
    done
done

"$LOAD_BIN" report --ratio tls/plain --markdown "$OUT/tls-cost.md.tmp" --json "$OUT/tls-cost.json" \
    --title "tidemark: plain vs TLS (median runs; modern = a new connection per call)" \
    "$RUNS_DIR"/*.json >/dev/null
{
    echo "Machine: $(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"
    echo "$(uname -sr), $(rustc --version). Server: 1 worker thread on CPU $SERVER_CPU; load"
    echo "generator on CPU $LOAD_CPU; $RUNS alternating run(s) of $DURATION after $WARMUP warm-up; medians."
    echo "TLS: rustls (ring), P-256 certificate, TLS 1.3, full handshakes (client resumption off)."
    echo
    cat "$OUT/tls-cost.md.tmp"
    echo
    echo "The server's CPU share in each load run (set-up and warm-up included; under 100 % the load"
    echo "generator, which does the client's side of TLS on one CPU, was the bottleneck) and the"
    echo "server's CPU per call (share / calls per second; the median run):"
    echo
    echo "| scenario | server | CPU share per run (%) | server CPU µs per call (median) |"
    echo "|---|---|---|---:|"
    awk '{ k = $1 " | " $2; v[k] = v[k] (v[k] == "" ? "" : ", ") $4; u[k] = u[k] " " $5 }
        END { for (k in v) { n = split(u[k], a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
              print "| " k " | " v[k] " | " a[int((n + 1) / 2)] " |" } }' "$OUT/tls-cost-cpu.txt" | sort
} >"$OUT/tls-cost.md"
rm -f "$OUT/tls-cost.md.tmp"
cat "$OUT/tls-cost.md"
echo
echo "tls-cost.sh: wrote $OUT/tls-cost.md, tls-cost.json"
exit "$FAILED"
