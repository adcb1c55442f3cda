#!/usr/bin/env bash
# Usage: scripts/fault.sh [--calls N] [--concurrent-calls N] [--seed S] [--drivers uring,epoll]
#                         [--timeout SECS] [--no-build] [--help] [-- TIDEMARK-LOAD-FAULT-ARGS...]
#
# The randomized fault test (issue 11 §8). For each driver (io_uring, then epoll): starts
#   target/release/tidemark --threads 2 --listen 127.0.0.1:0 --tools demo --driver D
#                           --metrics-listen 127.0.0.1:0
# and runs `tidemark-load fault --calls N` against it: many sessions on both cores,
# slow_counter calls with progress, connections cut at random points (FIN or RST, up to three
# times per call), each cut recovered at random (GET from the client's cursor, re-POST and the
# 409 hint, Idempotency-Key retry); per call every progress value once and in order with one
# result, globally the execution counter up by exactly the number of calls.
#   --calls N      calls per driver (default 2000)
#   --concurrent-calls N  then, per driver, a run of N calls (default 2000; 0: none) with
#                  --concurrent-callers: two callers per session whose calls may be identical; a
#                  409 matched by params to the other's stream is re-sent with a fresh
#                  Idempotency-Key, and no caller may receive another call's events (issue 17
#                  item 8). Its runs are named DRIVER+concurrent.
#   --seed S       seed of the random choices (default: a new one, printed; the same for every
#                  driver); a failed call reruns alone with
#                  tidemark-load fault --seed S --first-call C --calls 1
#   --drivers LIST comma-separated, from uring,epoll (default both)
#   --timeout SECS bound on each run (default 120 + N/50, N the larger of the two counts)
#   --no-build     use the binaries already in target/release
#   -- ARGS        passed on to every tidemark-load fault run (e.g. --connections 8 --delay-ms 0,2;
#                  the concurrent runs take an even --connections and no --sessions)
#
# Loopback only. Prints one PASS/FAIL line per run and `fault: N passed, M failed`; exit 0
# only when every run passed. Logs, traces of every call and --json reports: target/fault/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/fault"

calls=2000
concurrent_calls=2000
seed=""
drivers="uring,epoll"
run_timeout=""
build=1
extra=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --calls) calls="${2:?--calls needs a value}"; shift 2 ;;
        --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
        --drivers) drivers="${2:?--drivers needs a value}"; shift 2 ;;
        --timeout) run_timeout="${2:?--timeout needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --concurrent-calls) concurrent_calls="${2:?--concurrent-calls needs a value}"; shift 2 ;;
        --help) sed -n '2,32s/^# \{0,1\}//p' "$0"; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "fault.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$calls" in ''|*[!0-9]*) echo "fault.sh: --calls takes a number" >&2; exit 2 ;; esac
case "$concurrent_calls" in
    ''|*[!0-9]*) echo "fault.sh: --concurrent-calls takes a number" >&2; exit 2 ;;
esac
most_calls=$((calls > concurrent_calls ? calls : concurrent_calls))
run_timeout="${run_timeout:-$((120 + most_calls / 50))}"
seed="${seed:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}"
IFS=',' read -r -a selected <<<"$drivers"
for d in "${selected[@]}"; do
    case "$d" in
        uring|epoll) ;;
        *) echo "fault.sh: unknown driver '$d' (known: uring, epoll)" >&2; exit 2 ;;
    esac
done

cd "$ROOT"
if [ "$build" = 1 ]; then
    cargo build --release -p tidemark -p tidemark-load
fi
# shellcheck source=server-lib.sh
source "$ROOT/scripts/server-lib.sh"
mkdir -p "$OUT"

passed=0
failed=0
summary=()
echo "fault: $calls calls per driver (+ $concurrent_calls with concurrent callers)," \
    "seed $seed, at most ${run_timeout}s per run"
runs=()
for d in "${selected[@]}"; do
    runs+=("$d")
    if [ "$concurrent_calls" -gt 0 ]; then runs+=("$d+concurrent"); fi
done
for d in "${runs[@]}"; do
    run_calls="$calls"
    mode=()
    if [ "${d#*+}" = concurrent ]; then run_calls="$concurrent_calls"; mode=(--concurrent-callers); fi
    log="$OUT/$d.server.log"
    start_server "$log" "$TARGET/release/tidemark" --threads 2 --listen 127.0.0.1:0 \
        --tools demo --driver "${d%+*}" --metrics-listen 127.0.0.1:0
    banner="$(head -n 1 "$log")"
    got_driver="$(grep -o 'driver=[^ ]*' <<<"$banner" | cut -d= -f2 || true)"
    metrics_args=()
    metrics="$(grep -o 'metrics=http://[^ ]*' <<<"$banner" | cut -d= -f2 || true)"
    [ -n "$metrics" ] && metrics_args=(--metrics-url "$metrics")
    start=$SECONDS
    rc=0
    timeout --kill-after=10 "$run_timeout" "$TARGET/release/tidemark-load" fault \
        --url "$SERVER_URL" --label "tidemark-$d" --calls "$run_calls" --seed "$seed" ${mode[@]+"${mode[@]}"} \
        ${metrics_args[@]+"${metrics_args[@]}"} --quiet --json "$OUT/$d.json" --trace-file "$OUT/$d.trace" \
        ${extra[@]+"${extra[@]}"} >"$OUT/$d.out" 2>"$OUT/$d.err" || rc=$?
    secs=$((SECONDS - start))
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "fault.sh: the $d server died during the run; its log:" >&2
        cat "$log" >&2
        if [ "$rc" = 0 ]; then rc=3; fi
    fi
    stop_server
    line="$(grep '^fault:' "$OUT/$d.out" | tail -n 1 || true)"
    counts="$(sed -E 's/^fault: //; s/ (OK|FAILED)$//' <<<"$line")"
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        summary+=("PASS $d ($got_driver, ${secs}s): $counts")
    else
        failed=$((failed + 1))
        why="exit $rc"
        [ "$rc" = 124 ] && why="timed out after ${run_timeout}s"
        summary+=("FAIL $d ($got_driver, ${secs}s, $why): ${counts:-no summary} (see $OUT/$d.err)")
        grep -m 12 -E 'result: FAILED|FAILED \(call' "$OUT/$d.out" "$OUT/$d.err" >&2 || true
    fi
done
printf '%s\n' "${summary[@]}"
echo "fault: $passed passed, $failed failed"
[ "$failed" = 0 ]
