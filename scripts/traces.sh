#!/usr/bin/env bash
# Usage: scripts/traces.sh [--no-build] [--help]
#
# OpenTelemetry traces (issue 21 item 3) against a real OTLP receiver: tests/traces/
# otlp_receiver.py, a small OTLP/HTTP server that decodes every export with the official
# `opentelemetry-proto` bindings from PyPI (protobuf's strict JSON parser, or the binary
# decoder), installed into .cache/traces-venv (tests/traces/requirements.txt). The official
# collector is in none of the registries this project installs from. Then:
#   bridge  the receiver; an upstream tidemark (--tools conformance) and a front tidemark
#           (--tools demo --upstream http://…/mcp of the first, --threads 2), both with
#           --otlp-endpoint at the receiver; tests/traces/check_traces.py --scenario bridge
#           drives the front over raw HTTP with a client traceparent on every request and
#           checks: one SERVER span per request, the child of the client's span, with the MCP
#           semantic-convention name and attributes (error.type and an ERROR status on a
#           JSON-RPC error); the bridged call's CLIENT span under its SERVER span; the
#           upstream tidemark's SERVER span under that CLIENT span (the traceparent it was
#           sent); no traceparent or a malformed one: a root span of a new trace; an
#           unsampled one: no span on either tidemark; every export decoded.
#   drops   a receiver that never answers (--hang), a tidemark with --otlp-queue-spans 2 and
#           --metrics-listen: 40 requests are answered at once while the exporter hangs, and
#           tidemark_trace_spans_dropped_total counts the spans that did not fit.
#   --no-build   use target/release/tidemark as it is
#
# Loopback only. Prints PASS/FAIL per stage and `traces: N passed, M failed`; exit 0 only when
# all passed. Logs: target/traces/. Every process started here is stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/traces"
VENV="$ROOT/.cache/traces-venv"
TRACES="$ROOT/tests/traces"
START_TIMEOUT_S=30

build=1
usage() { sed -n '2,27s/^# \{0,1\}//p' "$0"; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --help) usage; exit 0 ;;
        *) echo "traces.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

SCRIPT_NAME=traces.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
# shellcheck source=SCRIPTDIR/pids-lib.sh
source "$ROOT/scripts/pids-lib.sh"

pip_install_pinned "$VENV" "$TRACES/requirements.txt" tidemark-traces-requirements.txt
PY="$VENV/bin/python"
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi
TIDEMARK="$TARGET/release/tidemark"
rm -rf "$OUT"
mkdir -p "$OUT"

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "traces: PASS $*"; }
fail() { failed=$((failed + 1)); echo "traces: FAIL $*"; }

# start NAME CMD...: starts CMD with its output in $OUT/NAME.{stdout,stderr}, records its pid,
# and sets `url` to the first URL of its first line (empty, with a FAIL, when it never says).
start() {
    local name="$1" pid
    shift
    "$@" >"$OUT/$name.stdout" 2>"$OUT/$name.stderr" &
    pid=$!
    pids+=("$pid")
    if ! url="$(wait_for_url "$OUT/$name.stdout" "$pid" "$name")"; then
        url=""
        fail "$name did not start: $(tail -n 3 "$OUT/$name.stderr" | tr '\n' ' ')"
    fi
    # The banner may name a second URL (metrics=…): the first is the listener's.
    url="${url%%$'\n'*}"
}

# ---- bridge ---------------------------------------------------------------------------------
start receiver "$PY" "$TRACES/otlp_receiver.py"
receiver="$url"
if [ -n "$receiver" ]; then
    start upstream "$TIDEMARK" --listen 127.0.0.1:0 --threads 1 --tools conformance \
        --otlp-endpoint "$receiver"
    upstream="$url"
    if [ -n "$upstream" ]; then
        # Both sets offer `greet`: a name two providers offer stops the start
        # (docs/gateway.md#names), so the upstream's is hidden.
        start front "$TIDEMARK" --listen 127.0.0.1:0 --threads 2 --tools demo \
            --upstream "$upstream" --upstream-deny-tools '*=greet' --otlp-endpoint "$receiver"
        front="$url"
        if [ -n "$front" ]; then
            if "$PY" "$TRACES/check_traces.py" --scenario bridge --front "$front" \
                --receiver "${receiver%/v1/traces}" >"$OUT/bridge.log" 2>&1; then
                pass "bridge: $(grep -c '^ok ' "$OUT/bridge.log") checks (spans, attributes, parentage, propagation)"
            else
                fail "bridge: $(grep '^FAIL' "$OUT/bridge.log" | head -n 5 | tr '\n' ' ') (log: $OUT/bridge.log)"
            fi
        fi
    fi
fi

# ---- drops ----------------------------------------------------------------------------------
start hanging-receiver "$PY" "$TRACES/otlp_receiver.py" --hang
hanging="$url"
if [ -n "$hanging" ]; then
    start dropping "$TIDEMARK" --listen 127.0.0.1:0 --threads 1 --metrics-listen 127.0.0.1:0 \
        --otlp-queue-spans 2 --otlp-endpoint "$hanging"
    dropping="$url"
    metrics="$(head -n 1 "$OUT/dropping.stdout" | grep -o 'metrics=http://[^ ]*' | cut -d= -f2 || true)"
    if [ -n "$dropping" ] && [ -n "$metrics" ]; then
        if "$PY" "$TRACES/check_traces.py" --scenario drops --front "$dropping" \
            --metrics "$metrics" >"$OUT/drops.log" 2>&1; then
            pass "drops: $(grep '^ok .*dropped' "$OUT/drops.log" | sed 's/^ok *//')"
        else
            fail "drops: $(grep '^FAIL' "$OUT/drops.log" | tr '\n' ' ') (log: $OUT/drops.log)"
        fi
    elif [ -n "$dropping" ]; then
        fail "drops: no metrics= in the banner"
    fi
fi

echo "traces: $passed passed, $failed failed"
[ "$failed" = 0 ]
