#!/usr/bin/env bash
# Usage: scripts/metrics.sh [--duration SECS] [--connections N] [--no-build] [--help]
#
# Metrics by the book (issue 21 item 2), against a real Prometheus:
#   1. target/release/tidemark --threads 2 --metrics-listen 127.0.0.1:0: its exposition, after
#      a few requests of each era, passes `promtool check metrics` (names, HELP/TYPE, units,
#      histogram layout), and every metric name deploy/grafana-dashboard.json uses exists in it;
#   2. Prometheus (Debian's `prometheus` package, which also provides promtool; apt-installed
#      when missing, as curl, through sudo when not root) scrapes it every second from a temp config and
#      data directory while `tidemark-load echo` runs --duration seconds of calls over
#      --connections connections; then its HTTP API (/api/v1/query) must say that:
#      - rate(tidemark_requests_total[3s]) was above zero mid-load (within 50 % of the load's
#        mean calls/s) and is zero after it;
#      - histogram_quantile(0.99, ...tidemark_request_duration_seconds_bucket{method="tools/call"})
#        was a number above zero and at most the load's own p99 (the server's time is within the
#        client's) times the widest bucket ratio (2.5, interpolation inside a bucket), and is
#        NaN (no calls) after it;
#      - the tools/call count it scraped last grew by the load's call count (within the calls
#        in flight when the load stopped: one per connection).
#   --duration SECS    load duration (default 6)
#   --connections N    load connections (default 8)
#   --no-build         use the binaries already in target/release
#
# Loopback only. Prints PASS/FAIL per check and `metrics: N passed, M failed`; exit 0 only when
# all passed. Logs and the Prometheus data: target/metrics/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/metrics"
DASHBOARD="$ROOT/deploy/grafana-dashboard.json"

duration=6
connections=8
build=1
usage() { sed -n '2,27s/^# \{0,1\}//p' "$0"; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --duration) duration="${2:?--duration needs a value}"; shift 2 ;;
        --connections) connections="${2:?--connections needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --help) usage; exit 0 ;;
        *) echo "metrics.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

# ---- installs (idempotent) ----------------------------------------------------------------
packages=()
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    packages+=(prometheus)
fi
command -v curl >/dev/null || packages+=(curl)
if [ "${#packages[@]}" -gt 0 ]; then
    # shellcheck source=SCRIPTDIR/apt-lib.sh
    source "$ROOT/scripts/apt-lib.sh"
    apt_install metrics.sh "${packages[@]}"
fi
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi
TIDEMARK="$TARGET/release/tidemark"
LOAD="$TARGET/release/tidemark-load"

rm -rf "$OUT"
mkdir -p "$OUT"
PROM_PID=""
# shellcheck source=SCRIPTDIR/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
cleanup() {
    stop_server
    if [ -n "$PROM_PID" ]; then
        kill "$PROM_PID" 2>/dev/null || true
        wait "$PROM_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

passed=0
failed=0
check() { # check NAME CONDITION-COMMAND...
    local name="$1"
    shift
    if "$@"; then
        echo "PASS $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        failed=$((failed + 1))
    fi
}

start_server "$OUT/tidemark.log" "$TIDEMARK" --threads 2 --listen 127.0.0.1:0 --tools demo \
    --metrics-listen 127.0.0.1:0
METRICS_URL="$(grep -o 'metrics=http://[^ ]*' "$OUT/tidemark.log" | head -n 1 | cut -d= -f2)"
METRICS_HOST="${METRICS_URL#http://}"
METRICS_HOST="${METRICS_HOST%/metrics}"

# A few requests of each era, so the histogram families have series to check.
post() { # post BODY [HEADER...]
    local body="$1"
    shift
    curl -sS -o /dev/null -D "$OUT/head.txt" -X POST "$SERVER_URL" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        "$@" -d "$body"
}
post '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"metrics.sh","version":"1"}}}'
sid="$(grep -i '^mcp-session-id:' "$OUT/head.txt" | cut -d' ' -f2 | tr -d '\r')"
post '{"jsonrpc":"2.0","method":"notifications/initialized"}' -H "Mcp-Session-Id: $sid"
post '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"progressToken":2}}}' \
    -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-11-25'
post '{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"metrics.sh","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: server/discover'
curl -sS "$METRICS_URL" >"$OUT/exposition.txt"

check "promtool check metrics" promtool check metrics <"$OUT/exposition.txt"
check "some request series in the exposition" \
    grep -q '^tidemark_request_duration_seconds_count{era="legacy",method="tools/call"} 1$' \
    "$OUT/exposition.txt"
dashboard_names_exist() {
    local missing=0 name family
    for name in $(grep -o 'tidemark_[a-z0-9_]*' "$DASHBOARD" | sort -u); do
        family="$(sed -E 's/_(bucket|sum|count)$//' <<<"$name")"
        if ! grep -q "^# TYPE \($name\|$family\) " "$OUT/exposition.txt"; then
            echo "  the dashboard uses $name: not in the exposition" >&2
            missing=1
        fi
    done
    [ "$missing" = 0 ]
}
check "every metric the Grafana dashboard uses is exposed" dashboard_names_exist

# ---- a real Prometheus scraping during a load run ------------------------------------------
PROM_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
PROM="http://127.0.0.1:$PROM_PORT"
cat >"$OUT/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tidemark
    static_configs:
      - targets: ["$METRICS_HOST"]
EOF
prometheus --config.file="$OUT/prometheus.yml" --storage.tsdb.path="$OUT/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$OUT/prometheus.log" 2>&1 &
PROM_PID=$!

# query EXPR [TIME]: the first result's value (or "none" when the vector is empty).
query() {
    local args=(--data-urlencode "query=$1")
    [ -n "${2:-}" ] && args+=(--data-urlencode "time=$2")
    curl -sS -G "$PROM/api/v1/query" "${args[@]}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["status"] == "success", d
r = d["data"]["result"]
print(r[0]["value"][1] if r else "none")'
}
wait_for() { # wait_for SECONDS WHAT COMMAND...
    local secs="$1" what="$2"
    shift 2
    for _ in $(seq 1 $((secs * 10))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "metrics.sh: gave up after ${secs}s waiting for $what" >&2
    tail -n 20 "$OUT/prometheus.log" >&2
    exit 1
}
up() { [ "$(query 'up{job="tidemark"}')" = 1 ]; }
wait_for 30 "Prometheus to scrape tidemark" up
CALLS='sum(tidemark_request_duration_seconds_count{method="tools/call"})'
sleep 1.5
before="$(query "$CALLS")"

load_start="$(date +%s.%N)"
"$LOAD" echo --url "$SERVER_URL" --connections "$connections" --duration "${duration}s" \
    --warmup 0s --quiet --json "$OUT/echo.json" >"$OUT/load.log" 2>&1
load_end="$(date +%s.%N)"
read -r load_calls load_p99_us < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
e = next(l for l in d["latency"] if l["name"] == "echo")
print(e["count"], e["p99_us"])' "$OUT/echo.json")
mid="$(python3 -c "print(($load_start + $load_end) / 2)")"
# Two scrapes after the load, so the last counts are in Prometheus.
sleep 2.5
after="$(query "$CALLS")"
rate_mid="$(query 'sum(rate(tidemark_requests_total[3s]))' "$mid")"
p99_mid="$(query 'histogram_quantile(0.99, sum by (le) (rate(tidemark_request_duration_seconds_bucket{method="tools/call"}[3s])))' "$mid")"
sleep 3
rate_idle="$(query 'sum(rate(tidemark_requests_total[3s]))')"
p99_idle="$(query 'histogram_quantile(0.99, sum by (le) (rate(tidemark_request_duration_seconds_bucket{method="tools/call"}[3s])))')"
echo "  load: $load_calls calls, client p99 ${load_p99_us} us; Prometheus: tools/call count $before -> $after, rate(tidemark_requests_total) mid-load $rate_mid/s then $rate_idle/s, p99 mid-load ${p99_mid}s then $p99_idle"

is() { python3 -c "import math, sys; x = float(sys.argv[1]); sys.exit(0 if ($1) else 1)" "$2"; }
check "rate(tidemark_requests_total) above zero mid-load" is 'x > 0' "$rate_mid"
check "rate(tidemark_requests_total) zero after the load" is 'x == 0' "$rate_idle"
check "mid-load rate within 50% of the load's mean calls/s" \
    is "abs(x - $load_calls / $duration) <= 0.5 * $load_calls / $duration" "$rate_mid"
check "p99 of tools/call mid-load above zero, within the client's p99 x 2.5" \
    is "0 < x <= $load_p99_us / 1e6 * 2.5" "$p99_mid"
check "p99 of tools/call NaN without calls" is 'math.isnan(x)' "$p99_idle"
check "tools/call count grew by the load's calls (+- $connections in flight)" \
    is "abs(x - $load_calls) <= $connections" "$(python3 -c "print($after - $before)")"

echo "metrics: $passed passed, $failed failed"
[ "$failed" = 0 ]
