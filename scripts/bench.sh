#!/usr/bin/env bash
# Usage: scripts/bench.sh [--runs N] [--duration D] [--warmup D] [--connections C]
#                         [--sessions-count K] [--server-cpu N] [--load-cpu N] [--out DIR]
#                         [--only LIST] [--quick] [--no-criterion] [--no-build] [--server-bin PATH]
#                         [--migration-resume-with hint|own]
#                         [--migration-connection both|kept|fresh] [--realtime PRIORITY]
#
# The benchmark suite of issue 5, sized for the 2-core project machine:
#   1. criterion micro-benchmarks (`cargo bench`), summarised as a markdown table;
#   2. the loadtest scenarios against a fresh release tidemark per run, each run --runs times
#      (default 3); the report takes medians:
#        ping        bare HTTP path baseline (JSON-RPC ping, JSON answers)
#        echo        tools/call echo (SSE answers, the default response mode)
#        echo-json   the same with --response-mode json
#        modern      tools/call echo as stateless 2026-07-28 requests (no session; JSON answers)
#        stream      slow_counter, 1000 steps, no delay: coalesced SSE events/s
#        resume      cut after 1 event, resume with 1/10/100/500 events buffered
#        migration   cut a running call, (a) GET resume vs (b) re-POST → 409 → GET; counters must be 0.
#                    The recovery goes out on a kept-alive connection and on a fresh one,
#                    alternating in one run; each mode reports its added round trip
#                    (re-POST sent → 409 read) p50/p90/p99/p99.9 and b − a per percentile
#        sessions    K idle sessions (default 100000), RSS per session
# Noise controls: tidemark runs one worker thread pinned to --server-cpu (default 0; tidemark
# pins worker i to CPU i, so 0 is the CPU it picks anyway), the load generator is pinned to
# --load-cpu (default 1) with taskset; each run starts a new server; the report keeps medians
# and every run's figure. Wall-clock numbers on this VM are bimodal (±20 %): trust the medians,
# and scripts/callgrind.sh for regressions.
#
# Output (default target/bench/): runs/*.json (one per run), bench.md (markdown tables to paste
# into docs/performance.md), bench.json (medians), bench-*.svg (HDR percentile plots), criterion.md,
# logs/. Exit status 1 when a run failed its correctness checks (migration and resume counters).
#
# Flags:
#   --runs N            runs per scenario (default 3; the median needs at least 3)
#   --duration D        measurement window per run (default 5s)
#   --warmup D          warm-up per run (default 1s)
#   --connections C     load connections for ping/echo/stream (default 64)
#   --sessions-count K  idle sessions for the sessions scenario (default 100000)
#   --server-cpu N      CPU for the server (default 0)
#   --load-cpu N        CPU for the load generator (default 1)
#   --out DIR           output directory (default target/bench)
#   --only LIST         comma-separated subset of: ping,echo,echo-json,modern,stream,resume,migration,
#                       sessions
#   --quick             1 run of 2s, 10000 sessions: a smoke test of the suite, not a measurement
#   --no-criterion      skip cargo bench
#   --no-build          use the binaries already in target/release
#   --server-bin PATH   the tidemark binary to measure (default target/release/tidemark)
#   --migration-resume-with hint|own
#                       in migration (b), resume from the 409's Last-Event-ID hint (default, as
#                       issue 5 says) or from the client's own last event id
#   --migration-connection both|kept|fresh
#                       the recovery's connection in migration (default both, alternating)
#   --realtime PRIORITY run the server and the load generator under SCHED_FIFO PRIORITY (chrt;
#                       root): other processes on the same CPUs (builds) then cannot delay them,
#                       which is what a latency tail on the shared 2-core machine needs; the
#                       VM's own wake-up costs remain (docs/performance.md, migration)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
DURATION=5s
WARMUP=1s
CONNECTIONS=64
SESSIONS_COUNT=100000
SERVER_CPU=0
LOAD_CPU=1
OUT="$ROOT/target/bench"
ONLY="ping,echo,echo-json,modern,stream,resume,migration,sessions"
CRITERION=1
BUILD=1
SERVER_BIN_FLAG=""
MIGRATION_RESUME_WITH=hint
MIGRATION_CONNECTION=both
REALTIME=""

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --sessions-count) SESSIONS_COUNT="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --quick) RUNS=1; DURATION=2s; WARMUP=0.5s; SESSIONS_COUNT=10000; shift ;;
        --no-criterion) CRITERION=0; shift ;;
        --no-build) BUILD=0; shift ;;
        --server-bin) SERVER_BIN_FLAG="$2"; shift 2 ;;
        --migration-resume-with) MIGRATION_RESUME_WITH="$2"; shift 2 ;;
        --migration-connection) MIGRATION_CONNECTION="$2"; shift 2 ;;
        --realtime) REALTIME="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

SERVER_BIN="${SERVER_BIN_FLAG:-$ROOT/target/release/tidemark}"
LOAD_BIN="$ROOT/target/release/tidemark-load"
mkdir -p "$OUT/runs" "$OUT/logs"


# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
pin_cpus "$SERVER_CPU" "$LOAD_CPU"
# cargo bench builds before it measures: never under SCHED_FIFO.
PIN_BENCH=("${PIN_LOAD[@]}")
if [ -n "$REALTIME" ]; then
    PIN_SERVER=(chrt --fifo "$REALTIME" "${PIN_SERVER[@]}")
    PIN_LOAD=(chrt --fifo "$REALTIME" "${PIN_LOAD[@]}")
fi

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi


wanted() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

FAILED=0
# run_scenario NAME RUN LABEL SERVER_FLAGS... -- LOAD_ARGS...
run_scenario() {
    local name="$1" run="$2" label="$3"
    shift 3
    local server_flags=()
    while [ "$1" != "--" ]; do server_flags+=("$1"); shift; done
    shift
    start_server "$OUT/logs/$name-$run.server.log" "${PIN_SERVER[@]}" "$SERVER_BIN" \
        --listen 127.0.0.1:0 --threads 1 --tools demo "${server_flags[@]}"
    echo "== $name run $run/$RUNS ($SERVER_URL)"
    if ! "${PIN_LOAD[@]}" "$LOAD_BIN" "$@" --url "$SERVER_URL" --label "$label" --quiet \
        --json "$OUT/runs/$name-$run.json" >"$OUT/logs/$name-$run.load.log" 2>&1; then
        echo "   FAILED (see $OUT/logs/$name-$run.load.log)"
        FAILED=1
    fi
    grep -E '^  (calls|events|responses|resumes|recoveries|sessions)_per_s|rss_per_session|result:' \
        "$OUT/logs/$name-$run.load.log" || tail -n 3 "$OUT/logs/$name-$run.load.log"
    stop_server
}

COMMON=(--duration "$DURATION" --warmup "$WARMUP")
rm -f "$OUT"/runs/*.json
for run in $(seq 1 "$RUNS"); do
    if wanted ping; then
        run_scenario ping "$run" tidemark -- ping "${COMMON[@]}" --connections "$CONNECTIONS"
    fi
    if wanted echo; then
        run_scenario echo "$run" tidemark -- echo "${COMMON[@]}" --connections "$CONNECTIONS"
    fi
    if wanted echo-json; then
        run_scenario echo-json "$run" "tidemark --response-mode json" --response-mode json \
            -- echo "${COMMON[@]}" --connections "$CONNECTIONS"
    fi
    if wanted modern; then
        run_scenario modern "$run" tidemark -- modern "${COMMON[@]}" --connections "$CONNECTIONS"
    fi
    if wanted stream; then
        run_scenario stream "$run" tidemark -- stream "${COMMON[@]}" --connections 16 --steps 1000
    fi
    if wanted resume; then
        run_scenario resume "$run" tidemark -- resume "${COMMON[@]}" --connections 4
    fi
    if wanted migration; then
        run_scenario migration "$run" tidemark -- migration "${COMMON[@]}" --connections 4 \
            --resume-with "$MIGRATION_RESUME_WITH" --connection "$MIGRATION_CONNECTION"
    fi
    if wanted sessions; then
        run_scenario sessions "$run" tidemark --max-sessions-per-core "$((SESSIONS_COUNT + 1000))" \
            -- sessions --sessions "$SESSIONS_COUNT" --connections 16
    fi
done

shopt -s nullglob
FILES=("$OUT"/runs/*.json)
if [ ${#FILES[@]} -gt 0 ]; then
    "$LOAD_BIN" report --markdown "$OUT/bench.md" --json "$OUT/bench.json" \
        --plot "$OUT/bench-all.svg" --title "tidemark, 1 server core (median runs)" "${FILES[@]}" \
        >/dev/null
    for name in ping echo echo-json modern stream resume migration sessions; do
        runs=("$OUT"/runs/"$name"-*.json)
        if [ ${#runs[@]} -gt 0 ]; then
            "$LOAD_BIN" plot --out "$OUT/bench-$name.svg" --title "tidemark $name, every run" "${runs[@]}"
        fi
    done
fi

if [ "$CRITERION" = 1 ]; then
    echo "== criterion"
    # Each bench by name: `--benches` also runs the library's own harness, which refuses
    # criterion's flags ("Unrecognized option: 'warm-up-time'") and failed the step.
    (cd "$ROOT" && "${PIN_BENCH[@]}" cargo bench --quiet -p tidemark --bench replay_ring \
        --bench migration_check --bench auth_jwt --bench token_validation -- --warm-up-time 1 \
        --measurement-time 3 >"$OUT/logs/criterion.log" 2>&1) || {
        echo "   cargo bench failed (see $OUT/logs/criterion.log)"
        FAILED=1
    }
    # cargo bench builds the server with the bench profile (thin LTO) and puts it at
    # target/release/tidemark, where a later --no-build run would take it: put the release
    # build back (a release build that is up to date only restores the file).
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
    if [ -d "$ROOT/target/criterion" ]; then
        "$LOAD_BIN" criterion --dir "$ROOT/target/criterion" --markdown "$OUT/criterion.md" >/dev/null
    fi
fi

{
    echo "Machine: $(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"
    echo "$(uname -sr), $(rustc --version). Server on CPU $SERVER_CPU (1 worker thread),"
    echo "load generator on CPU $LOAD_CPU; $RUNS run(s) of $DURATION after $WARMUP warm-up; medians."
    echo
    [ -f "$OUT/bench.md" ] && cat "$OUT/bench.md"
    if [ -f "$OUT/criterion.md" ]; then
        echo
        cat "$OUT/criterion.md"
    fi
} >"$OUT/README-performance.md"
cat "$OUT/README-performance.md"
echo
echo "bench.sh: wrote $OUT/README-performance.md, bench.md, bench.json, bench-*.svg, runs/"
exit "$FAILED"
