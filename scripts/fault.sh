#!/usr/bin/env bash
# Usage: scripts/fault.sh [--calls N] [--concurrent-calls N] [--modern-calls N] [--bridge-calls N]
#                         [--paths legacy,concurrent,modern,bridge-stdio,bridge-http] [--seed S]
#                         [--drivers uring,epoll] [--timeout SECS] [--audit]
#                         [--no-build] [--help] [-- TIDEMARK-LOAD-FAULT-ARGS...]
#
# The randomized fault test (issue 11 §8, issue 17), one run per path and driver.
# legacy: for each driver (io_uring, then epoll), starts
#   target/release/tidemark --threads 2 --listen 127.0.0.1:0 --tools demo --driver D
#                           --metrics-listen 127.0.0.1:0
# and runs `tidemark-load fault --calls N` against it: many sessions on both cores,
# slow_counter calls with progress, connections cut at random points (FIN or RST, up to three
# times per call), each cut recovered at random (GET from the client's cursor, re-POST and the
# 409 hint, Idempotency-Key retry); per call every progress value once and in order with one
# result, globally the execution counter up by exactly the number of calls.
# modern: the same server, `tidemark-load fault --path modern`: 2026-07-28 keyed calls, each
# cut and re-issued with a new id and the same Idempotency-Key, one in four with a concurrent
# duplicate (loadtest/src/scenario/fault_modern.rs).
# bridge-stdio: tidemark --upstream 'stdio:python3 tests/fixtures/stdio_upstream.py' (one
# child per session, its counter in a file); bridge-http: tidemark --upstream to a second
# tidemark --tools demo through tidemark-load's cutting proxy. Legacy calls cut on the client
# side as above; one in 8 also gets an upstream fault mid-call (child SIGKILLed / every
# upstream connection cut); a call ending with -32603 counts as upstream_failed, not as lost;
# executions by the upstream's counter (loadtest/src/scenario/fault_bridge.rs).
#   --calls N      legacy calls per driver (default 2000)
#   --concurrent-calls N  calls per driver of the `concurrent` path (default 2000): legacy
#                  calls with --concurrent-callers, two callers per session whose calls may be
#                  identical; a 409 matched by params to the other's stream is re-sent with a
#                  fresh Idempotency-Key, and no caller may receive another call's events
#                  (issue 17 item 8)
#   --modern-calls N   modern calls per driver (default 2000)
#   --bridge-calls N   bridged calls per driver and upstream (default 500)
#   --paths LIST   comma-separated, from legacy,concurrent,modern,bridge-stdio,bridge-http
#                  (default all)
#   --seed S       seed of the random choices (default: a new one, printed; the same for every
#                  driver); a failed call reruns alone with
#                  tidemark-load fault --seed S --first-call C --calls 1
#   --drivers LIST comma-separated, from uring,epoll (default both)
#   --timeout SECS bound on each run (default 120 + calls/50)
#   --audit        the legacy run gets a server of its own with --audit-log
#                  (target/fault/D.audit.jsonl), and scripts/audit-check.py then checks that
#                  every call id has exactly one line with the result its client got (its
#                  retries: 409 refusals and dedup hits, nothing else); the run fails if not
#   --no-build     use the binaries already in target/release
#   -- ARGS        passed on to tidemark-load fault (e.g. --connections 8 --delay-ms 0,2)
#
# Loopback only. Prints one PASS/FAIL line per run (path and driver) and
# `fault: N passed, M failed`; exit 0 only when every run passed. Logs, traces of every call
# and --json reports: target/fault/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/fault"

calls=2000
concurrent_calls=2000
modern_calls=2000
bridge_calls=500
paths="legacy,concurrent,modern,bridge-stdio,bridge-http"
seed=""
drivers="uring,epoll"
run_timeout=""
build=1
audit=0
extra=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --calls) calls="${2:?--calls needs a value}"; shift 2 ;;
        --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
        --drivers) drivers="${2:?--drivers needs a value}"; shift 2 ;;
        --timeout) run_timeout="${2:?--timeout needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --audit) audit=1; shift ;;
        --concurrent-calls) concurrent_calls="${2:?--concurrent-calls needs a value}"; shift 2 ;;
        --modern-calls) modern_calls="${2:?--modern-calls needs a value}"; shift 2 ;;
        --bridge-calls) bridge_calls="${2:?--bridge-calls needs a value}"; shift 2 ;;
        --paths) paths="${2:?--paths needs a value}"; shift 2 ;;
        --help) sed -n '2,45s/^# \{0,1\}//p' "$0"; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "fault.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
for n in "$calls" "$concurrent_calls" "$modern_calls" "$bridge_calls"; do
    case "$n" in ''|*[!0-9]*) echo "fault.sh: the --*calls flags take a number" >&2; exit 2 ;; esac
done
IFS=',' read -r -a selected_paths <<<"$paths"
for p in "${selected_paths[@]}"; do
    case "$p" in
        legacy|concurrent|modern|bridge-stdio|bridge-http) ;;
        *) echo "fault.sh: unknown path '$p' (known: legacy, concurrent, modern, bridge-stdio, bridge-http)" >&2; exit 2 ;;
    esac
done
most=$calls
[ "$concurrent_calls" -gt "$most" ] && most=$concurrent_calls
[ "$modern_calls" -gt "$most" ] && most=$modern_calls
[ "$bridge_calls" -gt "$most" ] && most=$bridge_calls
run_timeout="${run_timeout:-$((120 + most / 50))}"
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
upstream_pid=""
# The bridge-http run's upstream is not server-lib's SERVER_PID while its front runs.
trap 'stop_server; [ -z "$upstream_pid" ] || kill "$upstream_pid" 2>/dev/null || true' EXIT
mkdir -p "$OUT"

passed=0
failed=0
summary=()
# Whether PATH is among --paths.
wanted() { [[ ",$paths," == *",$1,"* ]]; }
# The metrics URL of the server that start_server started (from its banner in LOG).
metrics_of() { grep -o 'metrics=http://[^ ]*' <(head -n 1 "$1") | cut -d= -f2 || true; }
# fault_run NAME CALLS ARGS...: runs `tidemark-load fault` against $SERVER_URL with ARGS, with
# its output in $OUT/NAME.*, and adds its PASS/FAIL line to the summary.
fault_run() {
    local name="$1" n="$2"
    shift 2
    local start=$SECONDS rc=0
    timeout --kill-after=10 "$run_timeout" "$TARGET/release/tidemark-load" fault \
        --url "$SERVER_URL" --label "tidemark-$name" --calls "$n" --seed "$seed" \
        "$@" --quiet --json "$OUT/$name.json" --trace-file "$OUT/$name.trace" \
        ${extra[@]+"${extra[@]}"} >"$OUT/$name.out" 2>"$OUT/$name.err" || rc=$?
    local secs=$((SECONDS - start))
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "fault.sh: the $name server died during the run; its log:" >&2
        cat "$OUT/$name.server.log" >&2
        if [ "$rc" = 0 ]; then rc=3; fi
    fi
    local line counts
    line="$(grep '^fault:' "$OUT/$name.out" | tail -n 1 || true)"
    counts="$(sed -E 's/^fault: //; s/ (OK|FAILED)$//' <<<"$line")"
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        summary+=("PASS $name ($got_driver, ${secs}s): $counts")
    else
        failed=$((failed + 1))
        local why="exit $rc"
        [ "$rc" = 124 ] && why="timed out after ${run_timeout}s"
        summary+=("FAIL $name ($got_driver, ${secs}s, $why): ${counts:-no summary} (see $OUT/$name.err)")
        grep -m 12 -E 'result: FAILED|FAILED \(call' "$OUT/$name.out" "$OUT/$name.err" >&2 || true
        # A run that stopped without a summary (tidemark-load's own error, a panic): its last
        # words, since CI keeps only what the script prints.
        if [ -z "$counts" ]; then
            echo "fault.sh: the last lines of $name's stderr:" >&2
            tail -n 15 "$OUT/$name.err" >&2 || true
        fi
    fi
}
# start_tidemark NAME DRIVER ARGS...: a tidemark on loopback with a metrics listener.
start_tidemark() {
    local name="$1" d="$2"
    shift 2
    start_server "$OUT/$name.server.log" "$TARGET/release/tidemark" --threads 2 \
        --listen 127.0.0.1:0 --driver "$d" --metrics-listen 127.0.0.1:0 "$@"
    got_driver="$(grep -o 'driver=[^ ]*' <(head -n 1 "$OUT/$name.server.log") | cut -d= -f2 || true)"
    metrics_args=()
    local metrics
    metrics="$(metrics_of "$OUT/$name.server.log")"
    [ -n "$metrics" ] && metrics_args=(--metrics-url "$metrics")
}
echo "fault: paths $paths; per driver: $calls legacy, $concurrent_calls concurrent, $modern_calls modern, $bridge_calls bridged calls per upstream; seed $seed, at most ${run_timeout}s per run"
# audit_check NAME: the audit trail of run NAME (its server stopped, so the file is whole).
audit_check() {
    local line rc=0
    line="$(python3 "$ROOT/scripts/audit-check.py" --calls "$calls" "$OUT/$1.audit.jsonl" \
        2>"$OUT/$1.audit.err")" || rc=$?
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        summary+=("PASS $1 audit trail: $line")
    else
        failed=$((failed + 1))
        summary+=("FAIL $1 audit trail: ${line:-no summary} (see $OUT/$1.audit.err)")
        head -n 10 "$OUT/$1.audit.err" >&2 || true
    fi
}
for d in "${selected[@]}"; do
    if [ "$audit" = 1 ] && wanted legacy; then
        rm -f "$OUT/$d.audit.jsonl"
        start_tidemark "$d" "$d" --tools demo --audit-log "$OUT/$d.audit.jsonl"
        fault_run "$d" "$calls" ${metrics_args[@]+"${metrics_args[@]}"}
        stop_server
        audit_check "$d"
    fi
    if { wanted legacy && [ "$audit" = 0 ]; } || wanted concurrent || wanted modern; then
        start_tidemark "$d" "$d" --tools demo
        if wanted legacy && [ "$audit" = 0 ]; then
            fault_run "$d" "$calls" ${metrics_args[@]+"${metrics_args[@]}"}
        fi
        if wanted concurrent; then
            fault_run "$d+concurrent" "$concurrent_calls" --concurrent-callers \
                ${metrics_args[@]+"${metrics_args[@]}"}
        fi
        if wanted modern; then
            fault_run "modern-$d" "$modern_calls" --path modern ${metrics_args[@]+"${metrics_args[@]}"}
        fi
        stop_server
    fi
    if wanted bridge-stdio; then
        counter="$OUT/bridge-stdio-$d.counter"
        rm -f "$counter" "$counter.cancelled"
        start_tidemark "bridge-stdio-$d" "$d" --upstream-env "COUNTER_FILE=$counter" \
            --upstream "stdio:python3 $ROOT/tests/fixtures/stdio_upstream.py"
        fault_run "bridge-stdio-$d" "$bridge_calls" --path bridge-stdio --delay-ms 1,2 \
            ${metrics_args[@]+"${metrics_args[@]}"}
        stop_server
    fi
    if wanted bridge-http; then
        # The upstream: a second tidemark, reached only through tidemark-load's cutting proxy,
        # on a port picked free here (the proxy binds it when the run starts; tidemark connects
        # upstream only when a session opens).
        start_tidemark "bridge-http-upstream-$d" "$d" --tools demo
        upstream_pid=$SERVER_PID
        SERVER_PID=""
        upstream_addr="$(sed -E 's#^http://([^/]*)/.*#\1#' <<<"$SERVER_URL")"
        proxy_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
        start_tidemark "bridge-http-$d" "$d" --upstream "http://127.0.0.1:$proxy_port/mcp"
        fault_run "bridge-http-$d" "$bridge_calls" --path bridge-http \
            --proxy-listen "127.0.0.1:$proxy_port" --proxy-to "$upstream_addr" \
            ${metrics_args[@]+"${metrics_args[@]}"}
        stop_server
        SERVER_PID=$upstream_pid
        upstream_pid=""
        stop_server
    fi
done
printf '%s\n' "${summary[@]}"
echo "fault: $passed passed, $failed failed"
[ "$failed" = 0 ]
