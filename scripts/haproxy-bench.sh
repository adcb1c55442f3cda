#!/usr/bin/env bash
# Usage: scripts/haproxy-bench.sh [--no-build] [--duration SECS] [--rate N] [--help]
#
# The numbers of docs/deployment.md "Running several nodes", one run each, with tidemark-load (loadtest/):
# two tidemark nodes (--threads 1 each, --node-id 1 and 2) and one HAProxy (Debian's package;
# installed by scripts/haproxy.sh) on the configuration deploy/haproxy-config generates, all on
# loopback. Not a test (nothing is asserted but the load tool's own correctness checks).
#   latency    `echo` (legacy sessions) at a fixed --rate (default 2000/s, 8 connections):
#              straight to node 1, then through HAProxy (the sessions land on both nodes):
#              p50/p99 of each and the difference, HAProxy's added latency per call
#   aggregate  `echo` closed loop (64 connections): straight to node 1, then through HAProxy to
#              both nodes: calls/s of each
#   drain      `modern` (stateless 2026-07-28 echo) through HAProxy at the fixed rate for
#              --duration: once undisturbed, once with node 1 sent SIGTERM a third of the way in
#              and started again (same --node-id) two thirds in: a rolling restart's p99, errors
# Both nodes, HAProxy and the load generator share this machine's cores: the absolute numbers
# are a lower bound, the ratios are what to read. Reports in target/haproxy-bench/.
#
#   --no-build        use the existing release binaries (tidemark, tidemark-load)
#   --duration SECS   measurement window of each run (default 6)
#   --rate N          fixed rate of the latency and drain runs, calls/s (default 2000)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/target/haproxy-bench"
START_TIMEOUT_S=30
build=1
duration=6
rate=2000
while [ "$#" -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --duration) duration="${2:?}"; shift 2 ;;
        --rate) rate="${2:?}"; shift 2 ;;
        --help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "haproxy-bench.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
command -v haproxy >/dev/null || { echo "haproxy-bench.sh: install haproxy (scripts/haproxy.sh does)" >&2; exit 2; }
SCRIPT_NAME=haproxy-bench.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet && cargo build --release --quiet -p tidemark-load)
fi
TIDEMARK="$ROOT/target/release/tidemark"
LOAD="$ROOT/target/release/tidemark-load"
rm -rf "$OUT"
mkdir -p "$OUT"

# shellcheck source=SCRIPTDIR/pids-lib.sh
source "$ROOT/scripts/pids-lib.sh"

head -c 64 /dev/urandom >"$OUT/request-state.key"
P1="$(free_port)"; A1="$(free_port)"; P2="$(free_port)"; A2="$(free_port)"; HA="$(free_port)"
# start_node ID PORT ADMIN: sets node_pid.
start_node() {
    "$TIDEMARK" --listen "127.0.0.1:$2" --metrics-listen "127.0.0.1:$3" --node-id "$1" \
        --threads 1 --tools demo --request-state-key-file "$OUT/request-state.key" \
        >>"$OUT/node$1.stdout" 2>>"$OUT/node$1.stderr" &
    node_pid=$!
    pids+=("$node_pid")
    : >"$OUT/node$1.url"
    for _ in $(seq $((START_TIMEOUT_S * 10))); do
        if grep -q "http://127.0.0.1:$2" "$OUT/node$1.stdout" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "haproxy-bench.sh: node $1 did not start" >&2
    exit 1
}
start_node 1 "$P1" "$A1"
NODE1_PID=$node_pid
start_node 2 "$P2" "$A2"
"$ROOT/deploy/haproxy-config" --node "1=127.0.0.1:$P1,admin=$A1" \
    --node "2=127.0.0.1:$P2,admin=$A2" --listen "127.0.0.1:$HA" >"$OUT/haproxy.cfg"
haproxy -db -f "$OUT/haproxy.cfg" >"$OUT/haproxy.log" 2>&1 &
pids+=("$!")
sleep 3 # health checks: rise 2 at inter 1s
DIRECT="http://127.0.0.1:$P1/mcp"
VIA="http://127.0.0.1:$HA/mcp"

load() { # load NAME SCENARIO ARGS...
    local name="$1"
    shift
    "$LOAD" "$@" --label "$name" --duration "${duration}s" --quiet --json "$OUT/$name.json" \
        >"$OUT/$name.txt" 2>&1 || { echo "haproxy-bench.sh: $name failed:"; cat "$OUT/$name.txt"; }
}
summary() { # summary NAME: calls/s, p50 and p99 (µs) and errors of a run report
    python3 - "$OUT/$1.json" "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
lat = r["latency"][0]
errors = {k: v for k, v in r["counters"].items() if k.startswith("errors") and v}
print(f"{sys.argv[2]}: {r['throughput']['calls_per_s']:.0f} calls/s p50 {lat['p50_us']:.1f} us "
      f"p99 {lat['p99_us']:.1f} us p99.9 {lat['p999_us']:.1f} us max {lat['max_us']:.1f} us "
      f"errors {errors or 0} ok {r['ok']}")
EOF
}

load latency-direct echo --url "$DIRECT" --connections 8 --rate "$rate"
load latency-haproxy echo --url "$VIA" --connections 8 --rate "$rate"
load aggregate-direct echo --url "$DIRECT" --connections 64
load aggregate-haproxy echo --url "$VIA" --connections 64
load drain-baseline modern --url "$VIA" --connections 8 --rate "$rate"
(
    sleep "$(python3 -c "print(1 + $duration / 3)")"
    kill -TERM "$NODE1_PID"
    wait "$NODE1_PID" 2>/dev/null || true
    sleep "$(python3 -c "print($duration / 3)")"
    start_node 1 "$P1" "$A1"
    echo "$node_pid" >"$OUT/node1-restarted.pid"
) &
restarter=$!
load drain-rolling modern --url "$VIA" --connections 8 --rate "$rate"
wait "$restarter" || true
[ -s "$OUT/node1-restarted.pid" ] && pids+=("$(cat "$OUT/node1-restarted.pid")")
for name in latency-direct latency-haproxy aggregate-direct aggregate-haproxy drain-baseline \
    drain-rolling; do
    summary "$name"
done | tee "$OUT/summary.txt"
