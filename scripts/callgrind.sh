#!/usr/bin/env bash
# Usage: scripts/callgrind.sh [--requests N] [--connections C] [--scenario S] [--rate R]
#                             [--count all|requests] [--server-bin PATH] [--server-args "ARGS"]
#                             [--out DIR] [--no-build]
#
# Instructions per request, counted by valgrind's callgrind (stable where wall time is noisy:
# the CI regression metric of runtime-notes §6). Runs the release server under
#   valgrind --tool=callgrind --separate-threads=yes
# and drives it with tidemark-load. Each measurement is bracketed with callgrind_control -z
# (zero) and -d (dump): once with N requests and once with 2N, on fresh sessions and
# connections each time, so the set-up (initialize, accept, first touches) cancels out:
#   Ir per request = (Ir(2N run) - Ir(N run)) / N, summed over all server threads.
# User-space instructions only: the kernel's share (most of the cost on loopback) is not seen,
# nor is a child process's (--trace-children=no: the stdio upstream of bridged-echo).
# The default uses tidemark's epoll driver: under valgrind 3.19 the io_uring driver deadlocks at
# start-up more often than not (valgrind keeps its big thread lock while a worker waits in
# io_uring_enter, so main never runs); pass --server-args to try io_uring (5 start attempts).
#
# Output (default target/bench/callgrind/): callgrind.out.* dumps, annotate.txt (the top
# functions of the 2N run), result.txt; the last stdout line is
#   callgrind: <scenario> <Ir per request> instructions/request
#
# What repeats (scripts/cost.sh, the cost gate, uses all three): --connections 1 (one request
# in flight), --rate (every request finds the server idle, so the event loop parks and wakes
# once per request; closed loop, whether the next request is already there when the worker
# would park is a race) and --count requests (no count inside the driver's blocking park nor
# the session reaper's task: both are paid per unit of wall time, which valgrind stretches).
#
# Flags:
#   --requests N       requests in the smaller run (default 20000; the larger runs 2N)
#   --connections C    connections (and sessions) of the load (default 4)
#   --scenario S       echo (default: tools/call echo on a session), ping, modern-echo (a
#                      stateless 2026-07-28 tools/call echo: `tidemark-load modern`) or
#                      bridged-echo (echo through --upstream stdio:target/release/
#                      tidemark-stdio-echo, no built-in tools)
#   --rate R           measured requests a second, open loop (default: closed loop); the
#                      warm-up stays closed loop
#   --count C          all (default: every instruction of every server thread) or requests
#                      (all but the driver's blocking park and the reaper's task; needs objdump
#                      to find the reaper's task by its mangled name; dumps are not demangled)
#   --server-bin PATH  server binary (default target/release/tidemark)
#   --server-args A    its arguments (default "--listen 127.0.0.1:0 --threads 1 --tools demo
#                      --driver epoll", --upstream ... instead of --tools demo for bridged-echo;
#                      see below)
#   --out DIR          output directory (default target/bench/callgrind)
#   --no-build         use the binaries already built
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQUESTS=20000
CONNECTIONS=4
SCENARIO=echo
SERVER_BIN="$ROOT/target/release/tidemark"
SERVER_ARGS=""
OUT="$ROOT/target/bench/callgrind"
BUILD=1
RATE=""
COUNT=all

while [ $# -gt 0 ]; do
    case "$1" in
        --requests) REQUESTS="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --scenario) SCENARIO="$2"; shift 2 ;;
        --server-bin) SERVER_BIN="$2"; shift 2 ;;
        --server-args) SERVER_ARGS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --rate) RATE="$2"; shift 2 ;;
        --count) COUNT="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "callgrind.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
# The load's subcommand per scenario; bridged-echo puts tidemark in front of the stdio echo
# server (not traced: valgrind's --trace-children=no, so only tidemark's instructions count).
ECHO_UPSTREAM="$ROOT/target/release/tidemark-stdio-echo"
case "$SCENARIO" in
    echo|ping) LOAD_CMD="$SCENARIO"; TOOLS="--tools demo" ;;
    modern-echo) LOAD_CMD=modern; TOOLS="--tools demo" ;;
    bridged-echo) LOAD_CMD=echo; TOOLS="--upstream stdio:$ECHO_UPSTREAM" ;;
    *) echo "callgrind.sh: --scenario echo|ping|modern-echo|bridged-echo" >&2; exit 2 ;;
esac
SERVER_ARGS="${SERVER_ARGS:-"--listen 127.0.0.1:0 --threads 1 $TOOLS --driver epoll"}"
case "$COUNT" in all|requests) ;; *) echo "callgrind.sh: --count all|requests" >&2; exit 2 ;; esac

# --count requests: collection off (callgrind --toggle-collect) inside the driver's blocking park
# (epoll_wait and the timer wheel between requests: how often it runs depends on timing) and
# inside the session reaper (paid per 250 ms of wall time, which valgrind stretches). The
# reaper is an async fn; when it is inlined into its task's monoio::task::raw::poll (or, as the
# inliner decides, CoreStage::poll), whose demangled name every task shares, it is found by
# mangled name: the one task poll that calls what only the reaper calls (REAPER_CALLS). A toggle nested in another flips collection back
# on, so exactly one reaper function is named.
REAPER_CALLS='TaskStore6expire|SessionTimers7pop_due|8Endpoint6expire|8Endpoint6sample'
COLLECT=()
set_collect() {
    [ "$COUNT" = requests ] || return 0
    command -v objdump >/dev/null || { echo "callgrind.sh: objdump not found (apt-get install binutils)" >&2; exit 2; }
    local reaper
    reaper="$(objdump -d --no-show-raw-insn "$SERVER_BIN" \
        | awk -v calls="$REAPER_CALLS" '
            /^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3) }
            $0 ~ "call.*(" calls ")" && fn ~ /^_ZN8tidemark7runtime4reap/ { print fn }
            $0 ~ "call.*(" calls ")" && fn ~ /^_ZN6monoio4task(3raw4poll|4core18CoreStage)/ { print fn }' | sort -u)"
    # A reaper of its own (not inlined) wins over the task poll that calls it.
    if printf '%s\n' "$reaper" | grep -q '^_ZN8tidemark7runtime4reap'; then
        reaper="$(printf '%s\n' "$reaper" | grep '^_ZN8tidemark7runtime4reap')"
    fi
    if [ "$(printf '%s\n' "$reaper" | grep -c .)" != 1 ]; then
        echo "callgrind.sh: cannot find the reaper in $SERVER_BIN (found: ${reaper:-none});" \
            "update REAPER_CALLS" >&2
        exit 1
    fi
    # --toggle-collect sets --collect-atstart=no unless it is given after it.
    COLLECT=(--demangle=no "--toggle-collect=_ZN*TimeDriver*Driver\$GT\$4park17h*"
             "--toggle-collect=$reaper" --collect-atstart=yes)
}
for tool in valgrind callgrind_control callgrind_annotate; do
    command -v "$tool" >/dev/null || { echo "callgrind.sh: $tool not found (apt-get install valgrind)" >&2; exit 2; }
done

LOAD_BIN="$ROOT/target/release/tidemark-load"
if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi
set_collect
mkdir -p "$OUT"
rm -f "$OUT"/callgrind.out.*

LOG="$OUT/server.log"
PID=""
cleanup() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$PID" 2>/dev/null || true # a deadlocked valgrind ignores TERM
        wait "$PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

# With io_uring, start-up can deadlock under valgrind (see the header); once started, main only
# joins, so a retry is enough.
URL=""
for attempt in 1 2 3 4 5; do
    # shellcheck disable=SC2086 # SERVER_ARGS is a word list on purpose
    valgrind --tool=callgrind --separate-threads=yes --compress-strings=no --trace-children=no \
        ${COLLECT[@]+"${COLLECT[@]}"} \
        --callgrind-out-file="$OUT/callgrind.out.%p" \
        "$SERVER_BIN" $SERVER_ARGS >"$LOG" 2>&1 &
    PID=$!
    for _ in $(seq 1 300); do
        # The banner's URL: valgrind echoes the command line, which may name other URLs
        # (--otlp-endpoint, --upstream).
        URL="$(grep -o 'listening on http://[^ ]*' "$LOG" | head -n 1 | cut -d' ' -f3 || true)"
        [ -n "$URL" ] && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$URL" ] && break
    echo "callgrind.sh: start-up attempt $attempt hung or failed; retrying" >&2
    cleanup
    PID=""
    rm -f "$OUT"/callgrind.out.*
done
if [ -z "$URL" ]; then
    echo "callgrind.sh: the server did not start under valgrind; its log:" >&2
    cat "$LOG" >&2
    exit 1
fi
echo "callgrind.sh: server pid $PID at $URL"

# load N [RATE]: N requests, closed loop or at RATE a second.
load() {
    local rate="${2:-}"
    "$LOAD_BIN" "$LOAD_CMD" --url "$URL" --label callgrind --requests "$1" \
        --connections "$CONNECTIONS" --warmup 0 --duration 600s --timeout 60s --quiet \
        ${rate:+--rate "$rate"} \
        >>"$OUT/load.log" 2>&1 || { echo "callgrind.sh: the load failed (see $OUT/load.log)" >&2; exit 1; }
}

# Sets TOTAL to the sum of the `summary:` lines of the dump files written since the last call.
SEEN=""
TOTAL=0
new_dump_total() {
    local total=0 file
    for file in "$OUT"/callgrind.out."$PID".*; do
        [ -e "$file" ] || continue
        case " $SEEN " in *" $file "*) continue ;; esac
        SEEN="$SEEN $file"
        local ir
        ir="$(grep -m1 '^summary:' "$file" | awk '{print $2}')"
        total=$((total + ${ir:-0}))
    done
    TOTAL="$total"
}

measure() {
    callgrind_control -z "$PID" >/dev/null 2>&1
    load "$1" "$RATE"
    callgrind_control -d "$PID" >/dev/null 2>&1
    sleep 0.5
    new_dump_total
}

: >"$OUT/load.log"
load 2000 # warm caches, allocator pools, lazy statics
measure "$REQUESTS"
IR_1="$TOTAL"
measure "$((2 * REQUESTS))"
IR_2="$TOTAL"
if [ "$IR_1" -le 0 ] || [ "$IR_2" -le "$IR_1" ]; then
    echo "callgrind.sh: implausible counts ($IR_1, $IR_2); see $OUT" >&2
    exit 1
fi
PER=$(( (IR_2 - IR_1) / REQUESTS ))

# Top functions of the larger run, all threads.
LAST_FILES=()
for file in $SEEN; do
    case "$file" in *".2-"*|*".2") LAST_FILES+=("$file") ;; esac
done
if [ ${#LAST_FILES[@]} -gt 0 ]; then
    for file in "${LAST_FILES[@]}"; do
        echo "=== $file"
        callgrind_annotate --threshold=95 "$file" 2>/dev/null | sed -n '1,60p'
    done >"$OUT/annotate.txt"
fi

{
    echo "server: $SERVER_BIN $SERVER_ARGS"
    echo "scenario: $SCENARIO over $CONNECTIONS connection(s)"
    echo "Ir with $REQUESTS requests: $IR_1"
    echo "Ir with $((2 * REQUESTS)) requests: $IR_2"
    echo "instructions per $SCENARIO request (difference / $REQUESTS): $PER"
} | tee "$OUT/result.txt"
echo "callgrind: $SCENARIO $PER instructions/request"
