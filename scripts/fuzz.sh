#!/usr/bin/env bash
# Usage: scripts/fuzz.sh [--seconds N | --runs N] [--target NAME[,NAME...]] [--jobs N]
#                        [--replay-only] [--help]
#
# Coverage-guided fuzzing of tidemark with libFuzzer, through cargo-fuzz on the stable toolchain
# (--sanitizer none: coverage instrumentation is a stable -C flag; only the sanitizers need
# nightly). The targets live in fuzz/ (its own crate, outside the workspace):
#   http_head   request-head parser          jsonrpc    JSON-RPC decoder + canonical fingerprint
#   event_id    event id / Last-Event-ID     sse        SSE encoder against a WHATWG decoder
#   endpoint    a server in-process, fed byte streams over loopback TCP with drops and resets
#
# Steps: install cargo-fuzz into .cache/cargo-fuzz (once; ~30 s cold), build the instrumented
# targets (~2 min cold on 2 cores), then run each selected target in turn, starting from the
# committed seeds (fuzz/corpus/NAME) plus the working corpus .cache/fuzz/corpus/NAME, which keeps
# what earlier runs found. A crash, an input slower than 60 s, or more than 2 GiB of memory stops
# that target with the input in .cache/fuzz/artifacts/NAME/; reproduce it with
#   cargo fuzz run -s none NAME .cache/fuzz/artifacts/NAME/crash-...    (from the repo root)
#
#   --seconds N    fuzz each target N seconds (default 20)
#   --runs N       fuzz each target for N executions instead (e.g. 10000000 for a long run)
#   --target LIST  only these targets (comma-separated; default: all five)
#   --jobs N       N fuzzing processes per target (libFuzzer -fork=N; needs --seconds)
#   --replay-only  no fuzzer: replay every committed corpus file in a plain build (cargo test)
#
# Exit 0 only when every selected target ran without a finding. Loopback only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ALL_TARGETS="http_head,jsonrpc,event_id,sse,endpoint"
CARGO_FUZZ_VERSION="0.13.2"
CACHE="$ROOT/.cache"

seconds=20
runs=""
targets="$ALL_TARGETS"
jobs=1
replay_only=0
while [ "$#" -gt 0 ]; do
    case "$1" in
        --seconds) seconds="${2:?--seconds needs a value}"; shift 2 ;;
        --runs) runs="${2:?--runs needs a value}"; shift 2 ;;
        --target) targets="${2:?--target needs a value}"; shift 2 ;;
        --jobs) jobs="${2:?--jobs needs a value}"; shift 2 ;;
        --replay-only) replay_only=1; shift ;;
        --help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "fuzz.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
IFS=',' read -r -a selected <<<"$targets"
for t in "${selected[@]}"; do
    case ",$ALL_TARGETS," in
        *",$t,"*) ;;
        *) echo "fuzz.sh: unknown target '$t' (known: $ALL_TARGETS)" >&2; exit 2 ;;
    esac
done
if [ "$jobs" != 1 ] && [ -n "$runs" ]; then
    echo "fuzz.sh: --jobs needs --seconds (libFuzzer's fork mode counts time, not runs)" >&2
    exit 2
fi

cd "$ROOT"
if [ "$replay_only" = 1 ]; then
    exec cargo test --manifest-path fuzz/Cargo.toml
fi

install_cargo_fuzz() {
    local bin="$CACHE/cargo-fuzz/bin/cargo-fuzz"
    if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q " $CARGO_FUZZ_VERSION"; then
        return
    fi
    echo "fuzz.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION into $CACHE/cargo-fuzz"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" --root "$CACHE/cargo-fuzz"
}
install_cargo_fuzz
export PATH="$CACHE/cargo-fuzz/bin:$PATH"

echo "=== build (cargo fuzz build -s none) ==="
cargo fuzz build -s none

failed=0
summary=()
for t in "${selected[@]}"; do
    work="$CACHE/fuzz/corpus/$t"
    artifacts="$CACHE/fuzz/artifacts/$t"
    mkdir -p "$work" "$artifacts"
    # TIDEMARK_FUZZ_HANG_PAUSE=1 (endpoint): the harness sleeps 600 s inside the input when the
    # server stops answering; libFuzzer's -timeout would kill that process within seconds, so
    # the unit timeout is raised above the pause.
    # 60 s: above the endpoint probe's 30 s patience (fuzz/src/endpoint.rs, PROBE_DEADLINE).
    unit_timeout=60
    if [ "${TIDEMARK_FUZZ_HANG_PAUSE:-}" = 1 ]; then
        unit_timeout=700
    fi
    flags=("-timeout=$unit_timeout" -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1
        "-artifact_prefix=$artifacts/")
    if [ -f "fuzz/dict/$t.dict" ]; then
        flags+=("-dict=fuzz/dict/$t.dict")
    fi
    if [ -n "$runs" ]; then
        flags+=("-runs=$runs")
    else
        flags+=("-max_total_time=$seconds")
    fi
    if [ "$jobs" != 1 ]; then
        flags+=("-fork=$jobs")
    fi
    echo "=== $t ==="
    if [ "${TIDEMARK_FUZZ_HANG_PAUSE:-}" = 1 ] && [ "$jobs" != 1 ]; then
        # Fork mode sends each child's output to its own log: a paused child is found there.
        echo "fuzz.sh: a paused process logs 'paused 600 s' in ${TMPDIR:-/tmp}/libFuzzerTemp.FuzzWithFork*.dir/*.log"
    fi
    log="$CACHE/fuzz/$t.log"
    start=$SECONDS
    # The fuzzer's status lines and anything about a finding; the whole output is in $log.
    set +e
    cargo fuzz run -s none "$t" "$work" "fuzz/corpus/$t" -- "${flags[@]}" 2>&1 | tee "$log" \
        | grep -E '^#[0-9]+[[:space:]]+(INITED|DONE|pulse)|^stat::|ERROR|SUMMARY|panicked|written'
    statuses=("${PIPESTATUS[@]}")
    set -e
    rc=${statuses[0]}
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    # Fork mode prints no final stats; its last status line carries the total.
    if [ -z "$execs" ]; then
        execs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
    fi
    secs=$((SECONDS - start))
    if [ "$rc" = 0 ]; then
        summary+=("PASS $t (${execs:-?} executions, ${secs}s)")
    else
        failed=$((failed + 1))
        summary+=("FAIL $t (exit $rc after ${secs}s; input in $artifacts/, log $log)")
    fi
done
echo "=== fuzz summary ==="
printf '%s\n' "${summary[@]}"
passed=$(( ${#selected[@]} - failed ))
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
