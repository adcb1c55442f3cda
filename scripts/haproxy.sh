#!/usr/bin/env bash
# Usage: scripts/haproxy.sh [--no-build] [--help]
#
# tidemark scaled out behind a real HAProxy (Debian's `haproxy` package, apt-installed when
# missing; 2.6 or later): two nodes on loopback, each --threads 2 (--node-id 1 on the default
# driver, --node-id 2 with --driver epoll), and two HAProxy instances (A and B) running the
# configuration deploy/haproxy-config generates for them. Installs the official clients as scripts/clients.sh does (.cache/), builds the release
# binary, then:
#   config   `haproxy -c` accepts the generated configuration; deploy/haproxy.cfg is exactly what
#            the generator prints for its documented arguments (so the committed example is
#            never stale); `systemd-analyze verify` accepts deploy/tidemark.service (when
#            systemd-analyze is installed)
#   spread   sessions opened through A land on both nodes; a node-2 session sent straight to
#            node 1 gets the misrouted 404
#   clients  (both nodes share --request-state-key-file) through A, at once: the TypeScript client at each legacy version, the Python client
#            (legacy), the 2026-07-28 clients (Python SDK default mode, TypeScript v2 auto and
#            pinned); then through the cut proxy in front of A (TS close/drain/stall and 3
#            drops in one call, Python close): each resumes by itself on its session's node
#            with every progress event once and one execution; finally the sum of both nodes'
#            execution counters equals the number of slow_counter calls the clients made
#   raw      tests/clients/haproxy_checks.py: a legacy re-POST after a cut gets 409 -31001 and
#            the hint, and the GET from it through A finishes the call; a keyed 2026-07-28 call
#            cut through A and re-issued through B runs once; tasks created through A land on
#            both nodes and tasks/get through B finds each
#   drain    six calls run through A on both nodes; node 1 gets SIGTERM mid-call: every call
#            completes exactly once, node 1 exits 0, HAProxy marks it down, new sessions land
#            on node 2, and a node-1 session gets 503 + Retry-After from the balancer
#
#   --no-build   use the existing target/release/tidemark
#
# Prints one PASS/FAIL line per check and `haproxy: N passed, M failed`; logs in
# .cache/haproxy-results/. Exit 0 only when every check passed. Every process it started is
# stopped on exit (by its pid).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
CLIENTS="$ROOT/tests/clients"
RESULTS="$CACHE/haproxy-results"
TS_DIR="$CACHE/ts-clients"
TS_MODERN_DIR="$CACHE/ts-modern"
VENV="$CACHE/venv"
START_TIMEOUT_S=30
CLIENT_TIMEOUT_S=120

build=1
while [ "$#" -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --help) sed -n '2,34s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "haproxy.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

# ---- installs (idempotent) ----------------------------------------------------------------
# shellcheck source=SCRIPTDIR/apt-lib.sh
source "$ROOT/scripts/apt-lib.sh"
command -v haproxy >/dev/null || apt_install haproxy.sh haproxy
echo "haproxy.sh: $(haproxy -v | head -n 1)"
# shellcheck source=SCRIPTDIR/setup-node.sh
source "$ROOT/scripts/setup-node.sh"
SCRIPT_NAME=haproxy.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
npm_ci_pinned "$CLIENTS" "$TS_DIR" @modelcontextprotocol/sdk
cp "$CLIENTS/ts_client.mjs" "$TS_DIR/ts_client.mjs"
npm_ci_pinned "$CLIENTS/ts_modern" "$TS_MODERN_DIR" @modelcontextprotocol/client
cp "$CLIENTS/modern_ts_client.mjs" "$TS_MODERN_DIR/modern_ts_client.mjs"
pip_install_pinned "$VENV" "$CLIENTS/requirements.txt" tidemark-requirements.txt
PY="$VENV/bin/python"
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi
TIDEMARK="$ROOT/target/release/tidemark"

# ---- processes ----------------------------------------------------------------------------
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
# shellcheck source=SCRIPTDIR/pids-lib.sh
source "$ROOT/scripts/pids-lib.sh"

passed=0
failed=0
failed_names=()
verdict() { # verdict NAME RC DETAIL
    if [ "$2" = 0 ]; then
        passed=$((passed + 1))
        echo "haproxy: PASS $1 $3"
    else
        failed=$((failed + 1))
        failed_names+=("$1")
        echo "haproxy: FAIL $1 $3"
    fi
}

# Every node seals 2026-07-28 requestState with the same key, so an input-required round
# answered through the balancer may land on any node.
head -c 64 /dev/urandom >"$RESULTS/request-state.key"
# start_node NAME ID PORT ADMIN FLAGS...: a tidemark node; sets node_pid.
start_node() {
    local name="$1" id="$2" port="$3" admin="$4"
    shift 4
    "$TIDEMARK" --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$admin" --node-id "$id" \
        --tools demo,conformance --sse-retry-ms 200 \
        --request-state-key-file "$RESULTS/request-state.key" "$@" \
        >"$RESULTS/$name.stdout" 2>"$RESULTS/$name.stderr" &
    node_pid=$!
    pids+=("$node_pid")
    wait_for_url "$RESULTS/$name.stdout" "$node_pid" "$name" >/dev/null
}

P1="$(free_port)"; A1="$(free_port)"; P2="$(free_port)"; A2="$(free_port)"
start_node node1 1 "$P1" "$A1" --threads 2
NODE1_PID=$node_pid
start_node node2 2 "$P2" "$A2" --threads 2 --driver epoll
NODE2_PID=$node_pid
NODE1="http://127.0.0.1:$P1/mcp"
NODE2="http://127.0.0.1:$P2/mcp"

# ---- config -------------------------------------------------------------------------------
HA="$(free_port)"; HB="$(free_port)"; SA="$(free_port)"
nodes_args=(--node "1=127.0.0.1:$P1,admin=$A1" --node "2=127.0.0.1:$P2,admin=$A2")
"$ROOT/deploy/haproxy-config" "${nodes_args[@]}" --listen "127.0.0.1:$HA" \
    --stats "127.0.0.1:$SA" >"$RESULTS/a.cfg"
"$ROOT/deploy/haproxy-config" "${nodes_args[@]}" --listen "127.0.0.1:$HB" >"$RESULTS/b.cfg"
rc=0
{ haproxy -c -f "$RESULTS/a.cfg" && haproxy -c -f "$RESULTS/b.cfg" \
    && haproxy -c -f "$ROOT/deploy/haproxy.cfg"; } >"$RESULTS/config.log" 2>&1 || rc=$?
verdict config-valid "$rc" "(haproxy -c on the generated configurations and deploy/haproxy.cfg)"
rc=0
"$ROOT/deploy/haproxy-config" --node 1=127.0.0.1:8081,admin=9081 \
    --node 2=127.0.0.1:8082,admin=9082 | diff - "$ROOT/deploy/haproxy.cfg" \
    >"$RESULTS/config-diff.log" 2>&1 || rc=$?
verdict config-example-current "$rc" "(deploy/haproxy.cfg is the generator's output)"
# The generator refuses what no tidemark node can be: an id past 255, one id twice.
refused=0
for bad in "--node 256=127.0.0.1:1" "--node 1=127.0.0.1:1 --node 1=127.0.0.1:2" "--node x"; do
    # shellcheck disable=SC2086  # each case is a list of arguments
    if "$ROOT/deploy/haproxy-config" $bad >/dev/null 2>>"$RESULTS/config-refusals.log"; then
        echo "accepted: $bad" >>"$RESULTS/config-refusals.log"
    else
        refused=$((refused + 1))
    fi
done
rc=0
[ "$refused" = 3 ] || rc=1
verdict config-refusals "$rc" "(node id 256, a repeated id, a malformed --node: $refused of 3 refused)"

if command -v systemd-analyze >/dev/null; then
    # The unit as shipped, pointed at the binary just built.
    sed "s|/usr/local/bin/tidemark|$TIDEMARK|" "$ROOT/deploy/tidemark.service" \
        >"$RESULTS/tidemark.service"
    rc=0
    out="$(systemd-analyze verify "$RESULTS/tidemark.service" 2>&1)" || rc=$?
    [ -z "$out" ] || { echo "$out" >"$RESULTS/systemd-verify.log"; rc=1; }
    verdict systemd-unit "$rc" "(systemd-analyze verify deploy/tidemark.service)"
fi

haproxy -db -f "$RESULTS/a.cfg" >"$RESULTS/haproxy-a.log" 2>&1 &
pids+=("$!")
haproxy -db -f "$RESULTS/b.cfg" >"$RESULTS/haproxy-b.log" 2>&1 &
pids+=("$!")
VIA_A="http://127.0.0.1:$HA/mcp"
VIA_B="http://127.0.0.1:$HB/mcp"

stats_csv() {
    python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$SA/stats;csv" 2>/dev/null || true
}
# servers_up N: instance A's statistics list N servers UP in backend `pool`.
servers_up() {
    local up
    up="$(stats_csv | awk -F, '$1 == "pool" && $2 != "BACKEND" && $18 == "UP"' | wc -l)"
    [ "$up" = "$1" ]
}
for _ in $(seq 100); do servers_up 2 && break; sleep 0.1; done
if ! servers_up 2; then
    echo "haproxy.sh: HAProxy never saw both nodes ready" >&2
    stats_csv >&2 || true
    exit 1
fi

checks() { # checks NAME SUBCOMMAND ARGS...: one haproxy_checks.py run
    local name="$1"
    shift
    local rc=0
    timeout "$CLIENT_TIMEOUT_S" python3 "$CLIENTS/haproxy_checks.py" "$@" --via "$VIA_A" \
        --via-b "$VIA_B" --node "$NODE1" --node "$NODE2" >"$RESULTS/$name.log" 2>&1 || rc=$?
    verdict "$name" "$rc" "$(tail -n 1 "$RESULTS/$name.log")"
}

# ---- spread -------------------------------------------------------------------------------
checks spread spread
checks misrouted misrouted

# ---- clients ------------------------------------------------------------------------------
# run_client NAME KIND TARGET ARGS...: in the background; TARGET is a URL or proxy:K:N:ON_CUT
# (the cut proxy in front of instance A).
bg=()
bg_names=()
run_client() {
    local name="$1" kind="$2" target="$3"
    shift 3
    (
        set +e
        local url="$target" proxy_pid=""
        if [[ "$target" == proxy:* ]]; then
            IFS=':' read -r _ k n on_cut <<<"$target"
            python3 "$CLIENTS/cut_proxy.py" --upstream "127.0.0.1:$HA" --cut-after-events "$k" \
                --cut-streams "$n" --on-cut "$on_cut" >"$RESULTS/$name.proxy.out" 2>&1 &
            proxy_pid=$!
            local purl
            purl="$(wait_for_url "$RESULTS/$name.proxy.out" "$proxy_pid" cut_proxy)" || exit 1
            url="${purl%/}/mcp"
        fi
        local cmd
        case "$kind" in
            ts) cmd=(node "$TS_DIR/ts_client.mjs") ;;
            py) cmd=("$PY" "$CLIENTS/py_client.py") ;;
            ts-modern) cmd=(node "$TS_MODERN_DIR/modern_ts_client.mjs") ;;
        esac
        timeout "$CLIENT_TIMEOUT_S" "${cmd[@]}" --url "$url" --label "$name" "$@" \
            >"$RESULTS/$name.log" 2>&1
        local rc=$?
        if [ -n "$proxy_pid" ]; then
            kill "$proxy_pid" 2>/dev/null
            wait "$proxy_pid" 2>/dev/null
            if [ "$rc" = 0 ] && ! grep -q '^cut_proxy cut ' "$RESULTS/$name.proxy.out"; then
                echo "[$name] FAILED: the proxy never cut a stream" >>"$RESULTS/$name.log"
                rc=1
            fi
        fi
        exit "$rc"
    ) &
    bg+=("$!")
    bg_names+=("$name")
}
collect() {
    local i rc
    for i in "${!bg[@]}"; do
        rc=0
        wait "${bg[$i]}" || rc=$?
        verdict "${bg_names[$i]}" "$rc" "$(grep -m1 '\] ok:' "$RESULTS/${bg_names[$i]}.log" \
            | sed 's/^\[[^]]*\] ok: //' || tail -n 3 "$RESULTS/${bg_names[$i]}.log")"
        [ "$rc" = 0 ] || tail -n 15 "$RESULTS/${bg_names[$i]}.log" | sed 's/^/    /'
    done
    bg=()
    bg_names=()
}

counter_before=$(( $(node "$TS_DIR/ts_client.mjs" --url "$NODE1" --get-counter) \
    + $(node "$TS_DIR/ts_client.mjs" --url "$NODE2" --get-counter) ))
CUT_ARGS=(--steps 10 --delay-ms 50)
run_client ts-2025-11-25 ts "$VIA_A"
run_client ts-2025-06-18 ts "$VIA_A" --protocol-version 2025-06-18
run_client ts-2025-03-26 ts "$VIA_A" --protocol-version 2025-03-26
run_client py-legacy py "$VIA_A" --mode legacy
run_client modern-py py "$VIA_A" --steps 3 --mode sdk-default --expect-era modern --greet
run_client modern-ts-auto ts-modern "$VIA_A" --steps 3 --negotiation auto
run_client modern-ts-pin ts-modern "$VIA_B" --steps 3 --negotiation pin
collect
for on_cut in close drain stall; do
    run_client "ts-cut-$on_cut" ts "proxy:3:1:$on_cut" "${CUT_ARGS[@]}" --min-resumes 1
done
run_client ts-cut-3-streams ts "proxy:2:3:close" "${CUT_ARGS[@]}" --min-resumes 3
run_client py-cut-close py "proxy:3:1:close" "${CUT_ARGS[@]}" --min-resumes 1 --mode legacy
collect
# 12 client runs above, each calling slow_counter once.
counter_after=$(( $(node "$TS_DIR/ts_client.mjs" --url "$NODE1" --get-counter) \
    + $(node "$TS_DIR/ts_client.mjs" --url "$NODE2" --get-counter) ))
rc=0
[ "$((counter_after - counter_before))" = 12 ] || rc=1
verdict clients-exactly-once "$rc" \
    "(executions on both nodes: $counter_before -> $counter_after, 12 slow_counter calls)"

# ---- raw ----------------------------------------------------------------------------------
checks repost repost
checks keyed keyed
checks tasks tasks

# ---- drain --------------------------------------------------------------------------------
rm -f "$RESULTS/drain.signal"
timeout "$CLIENT_TIMEOUT_S" python3 "$CLIENTS/haproxy_checks.py" drain-calls --via "$VIA_A" \
    --node "$NODE1" --node "$NODE2" --survivors "$NODE2" --survivor-id 2 --signal-file "$RESULTS/drain.signal" \
    >"$RESULTS/drain-calls.log" 2>&1 &
drain_checker=$!
pids+=("$drain_checker")
for _ in $(seq 300); do [ -e "$RESULTS/drain.signal" ] && break; sleep 0.1; done
sleep 0.5
kill -TERM "$NODE1_PID"
rc=0
wait "$drain_checker" || rc=$?
verdict drain-calls "$rc" "$(tail -n 1 "$RESULTS/drain-calls.log")"
rc=0
for _ in $(seq 300); do kill -0 "$NODE1_PID" 2>/dev/null || break; sleep 0.1; done
node1_rc=0
wait "$NODE1_PID" || node1_rc=$?
verdict drain-exit-0 "$node1_rc" "(node 1 exit status $node1_rc after SIGTERM)"
for _ in $(seq 100); do servers_up 1 && break; sleep 0.1; done
checks after-drain after-drain --expect-prefix 02 --gone-prefix 01
kill -0 "$NODE2_PID" 2>/dev/null || verdict node2-alive 1 "(node 2 died)"

if [ "$failed" -gt 0 ]; then
    echo "haproxy: failed: ${failed_names[*]}"
fi
echo "haproxy: $passed passed, $failed failed"
[ "$failed" = 0 ]
