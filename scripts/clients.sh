#!/usr/bin/env bash
# Usage: scripts/clients.sh [--only STAGE[,STAGE...]] [--no-build] [--server-cmd CMD]
#                           [--example-cmd CMD] [--py-auto-era legacy|modern|any] [--help]
#
# Runs real MCP clients against tidemark: the official TypeScript SDK (tests/clients/ts_client.mjs)
# and the official Python SDK (tests/clients/py_client.py, in `legacy` and `auto` connect modes).
# Installs Node 22, the npm deps (.cache/ts-clients) and a Python venv with tests/clients/
# requirements.txt (.cache/venv), idempotently; builds tidemark (cargo build --release); then:
#   basic    one server (--tools demo, default flags): each client once per legacy protocol
#            version (2025-03-26, 2025-06-18, 2025-11-25), and the Python client in `auto` mode;
#            every run also checks through get_counter that slow_counter ran exactly once; the
#            TS 2025-11-25 run checks that the SSE `retry:` is the default (1000 ms)
#   cut      a server with --sse-retry-ms 200, each client through tests/clients/cut_proxy.py,
#            which drops the tools/call response stream mid-call (on-cut close, drain and stall;
#            and 3 drops in one call for TS): the client must resume by itself (GET +
#            Last-Event-ID) and end with the full result, every progress notification once, no
#            re-POST, one execution
#   epoll    a server with --driver epoll (hosts without io_uring): each client once directly
#            and once through the cut proxy
#   threads  a server with --threads 2: 4 TS + 4 Python clients and 2 cut-proxy runs at once
#            (many connections, so requests land on both cores), then the global counter must
#            equal the number of slow_counter calls
#   migration  CONTRACT §4 with the real TS client (ts_client.mjs --scenario cut-with-echo):
#            the proxy cuts a slow_counter stream and the same client then calls echo while that
#            stream is owed; both must complete, progress once each, one POST, one execution.
#            Against --migration-policy strict (retry 200 ms and the default 1000 ms) and off
#   example  the library embedding example (examples/custom_tool.rs, one tool `reverse`): builds
#            it (cargo build --release --example custom_tool; a failed build counts as one FAIL
#            and skips the runs), starts target/release/examples/custom_tool --listen
#            127.0.0.1:<free port>, then ts_client.mjs --scenario reverse at 2025-11-25 and
#            2025-06-18 and py_client.py --scenario reverse --mode legacy: tools/list shows
#            `reverse` (readOnlyHint, input schema requiring `text`), non-ASCII texts come back
#            reversed by Unicode scalar values, an unknown tool fails cleanly
#   modern   one server (--tools demo, default flags), the 2026-07-28 era (server/discover,
#            per-request _meta, no session) with three real clients, one after the other:
#            py_client.py in the SDK's default connect mode (mcp 2.x: `auto`) with --expect-era
#            modern --greet; tests/clients/modern_ts_client.mjs (@modelcontextprotocol/client v2,
#            installed from tests/clients/ts_modern/ into .cache/ts-modern) twice, versionNegotiation
#            `auto` and pinned to 2026-07-28; and the rmcp client of tests/clients/rmcp_modern/ (its
#            own workspace, built with cargo build --release --manifest-path ..., target dir
#            .cache/rmcp-modern-target; a failed build counts as one FAIL and skips its run) in
#            rmcp's Discover lifecycle. Each must end in protocol version 2026-07-28 and run echo,
#            slow_counter {steps: 3} (3 progress notifications, one execution by get_counter) and
#            greet, whose elicitation/create ("What is your name?", a required string `name`)
#            comes back as an InputRequiredResult that the SDK answers through the client's
#            elicitation handler ({name: "Ada"}) and retries with inputResponses: "Hello, Ada!"
#   tls      a server with --tls-cert/--tls-key (a test CA and a certificate for 127.0.0.1 made
#            with the openssl CLI into .cache/clients-results/tls/) and --threads 2, over https://:
#            the TS client (NODE_EXTRA_CA_CERTS = the CA) at 2025-11-25 and the TS v2 client pinned
#            to 2026-07-28; the Python client (SSL_CERT_FILE = the CA) in legacy mode and in its
#            default mode ending in 2026-07-28; each with --check-counter (one execution)
#   auth     a server with --auth-tokens (a token file written to .cache/clients-results): a
#            request without a token must get 401 with a WWW-Authenticate challenge; then the
#            Python client with --bearer-token in both eras (legacy, and the SDK default mode
#            ending in 2026-07-28), each checking one slow_counter execution
#   unix     a server on a Unix socket file alone (--listen unix:PATH, no TCP; --threads 2):
#            curl --unix-socket does initialize, notifications/initialized, tools/list and
#            tools/call echo on a session; then tests/clients/py_uds_client.py (the Python SDK
#            through an httpx AsyncHTTPTransport(uds=PATH) given as its http_client) in legacy
#            mode and in auto mode ending in 2026-07-28: tools/list, echo, slow_counter with its
#            3 progress notifications (15 s measured on the loaded 2-core machine, most of it the
#            SDK's import)
#
# The servers of the resuming stages run with --sse-retry-ms 200 (the SDK clients wait the SSE
# `retry:` before resuming, so each resume costs ~0.2 s instead of the default ~1 s); the basic
# server and one migration run keep the default, so the default value stays covered.
#
#   --only STAGES       run only these stages (comma-separated: basic,cut,epoll,threads,
#                       migration,example,modern,tls,auth,unix)
#   --no-build          do not run cargo build (use the existing target/release/tidemark and
#                       target/release/examples/custom_tool); the modern stage's rmcp client is
#                       still built when its binary is missing
#   --server-cmd CMD    start CMD instead of target/release/tidemark (the tidemark flags are
#                       appended; CMD must print tidemark's first line); for stand-in servers
#   --example-cmd CMD   the same for the example stage: start CMD instead of
#                       target/release/examples/custom_tool (not built then)
#   --py-auto-era ERA   era the Python client's `auto` mode must end in (default modern): it
#                       probes server/discover and falls back to initialize unless the server
#                       answers with a DiscoverResult naming 2026-07-28 (then: modern)
#
# Prints one PASS/FAIL line per client run and a final `clients: N passed, M failed`; logs are in
# .cache/clients-results/. Exit 0 only when every run passed. Servers and proxies are killed on
# exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
CLIENTS="$ROOT/tests/clients"
RESULTS="$CACHE/clients-results"
TS_DIR="$CACHE/ts-clients"
VENV="$CACHE/venv"
TS_MODERN_DIR="$CACHE/ts-modern"
RMCP_MODERN_TARGET="$CACHE/rmcp-modern-target"
RMCP_MODERN_BIN="$RMCP_MODERN_TARGET/release/tidemark-rmcp-modern-client"
ALL_STAGES="basic,cut,epoll,threads,migration,example,modern,tls,auth,unix"
START_TIMEOUT_S=30
CLIENT_TIMEOUT_S=120

usage() { sed -n '2,80s/^# \{0,1\}//p' "$0"; }

only="$ALL_STAGES"
build=1
server_cmd=""
example_cmd=""
py_auto_era="modern"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --only) only="${2:?--only needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --server-cmd) server_cmd="${2:?--server-cmd needs a value}"; shift 2 ;;
        --example-cmd) example_cmd="${2:?--example-cmd needs a value}"; shift 2 ;;
        --py-auto-era) py_auto_era="${2:?--py-auto-era needs a value}"; shift 2 ;;
        --help) usage; exit 0 ;;
        *) echo "clients.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
case "$py_auto_era" in legacy|modern|any) ;; *) echo "clients.sh: bad --py-auto-era" >&2; exit 2 ;; esac
IFS=',' read -r -a stages <<<"$only"
for s in "${stages[@]}"; do
    case ",$ALL_STAGES," in
        *",$s,"*) ;;
        *) echo "clients.sh: unknown stage '$s' (known: $ALL_STAGES)" >&2; exit 2 ;;
    esac
done
want_stage() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# ---- installs (idempotent) ----------------------------------------------------------------
# shellcheck source=SCRIPTDIR/setup-node.sh
source "$ROOT/scripts/setup-node.sh"
SCRIPT_NAME=clients.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
# shellcheck source=SCRIPTDIR/test-pki.sh
source "$ROOT/scripts/test-pki.sh"

npm_ci_pinned "$CLIENTS" "$TS_DIR" @modelcontextprotocol/sdk
# ESM resolves imports next to the script, so the client runs from the install directory.
cp "$CLIENTS/ts_client.mjs" "$TS_DIR/ts_client.mjs"
pip_install_pinned "$VENV" "$CLIENTS/requirements.txt" tidemark-requirements.txt
PY="$VENV/bin/python"
if want_stage unix && ! command -v curl >/dev/null; then
    # shellcheck source=SCRIPTDIR/apt-lib.sh
    source "$ROOT/scripts/apt-lib.sh"
    apt_install clients.sh curl
fi
if want_stage modern || want_stage tls; then
    # The TypeScript v2 client: its own package (tests/clients/ts_modern), so the v1 SDK install
    # of the other stages is untouched.
    npm_ci_pinned "$CLIENTS/ts_modern" "$TS_MODERN_DIR" @modelcontextprotocol/client
    cp "$CLIENTS/modern_ts_client.mjs" "$TS_MODERN_DIR/modern_ts_client.mjs"
fi

# Every stage but `example` runs tidemark itself (the example stage builds the example).
uses_tidemark=0
for s in "${stages[@]}"; do
    if [ "$s" != example ]; then uses_tidemark=1; fi
done
if [ -z "$server_cmd" ]; then
    if [ "$build" = 1 ] && [ "$uses_tidemark" = 1 ]; then
        (cd "$ROOT" && cargo build --release --quiet)
    fi
    server_cmd="$ROOT/target/release/tidemark"
fi

# ---- process bookkeeping ------------------------------------------------------------------
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
# shellcheck source=SCRIPTDIR/pids-lib.sh
source "$ROOT/scripts/pids-lib.sh"

# launch_server NAME CMD LISTEN FLAGS...: starts CMD --listen LISTEN FLAGS..., sets server_pid
# and server_url (read from the first stdout line).
launch_server() {
    local name="$1" cmd="$2" listen="$3"
    shift 3
    # shellcheck disable=SC2086  # cmd is a command line by design
    $cmd --listen "$listen" "$@" >"$RESULTS/server-$name.stdout" 2>"$RESULTS/server-$name.stderr" &
    server_pid=$!
    pids+=("$server_pid")
    if ! server_url="$(wait_for_url "$RESULTS/server-$name.stdout" "$server_pid" "server $name")"; then
        tail -n 20 "$RESULTS/server-$name.stderr" >&2
        exit 1
    fi
    echo "clients: server $name: $(head -n 1 "$RESULTS/server-$name.stdout")"
}

# start_server NAME FLAGS...: tidemark (or --server-cmd) on a port the kernel picks.
start_server() {
    local name="$1"
    shift
    launch_server "$name" "$server_cmd" 127.0.0.1:0 "$@"
}

stop_server() {
    if kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    else
        echo "clients: server $1 had died; stderr tail:" >&2
        tail -n 20 "$RESULTS/server-$1.stderr" >&2
        failed=$((failed + 1))
        failed_names+=("server-$1-died")
    fi
}

# launch_unix_server PATH FLAGS...: tidemark on the socket file PATH alone; sets server_pid
# once its banner (`tidemark listening on unix:PATH ...`) is out.
launch_unix_server() {
    local path="$1"
    shift
    # shellcheck disable=SC2086  # server_cmd is a command line by design
    $server_cmd --listen "unix:$path" "$@" >"$RESULTS/server-unix.stdout" \
        2>"$RESULTS/server-unix.stderr" &
    server_pid=$!
    pids+=("$server_pid")
    for _ in $(seq $((START_TIMEOUT_S * 10))); do
        if grep -q "listening on unix:" "$RESULTS/server-unix.stdout" 2>/dev/null; then
            echo "clients: server unix: $(head -n 1 "$RESULTS/server-unix.stdout")"
            return 0
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "clients: the unix server did not start" >&2
    tail -n 20 "$RESULTS/server-unix.stderr" >&2
    exit 1
}

# unix_curl_session PATH: curl --unix-socket through a session's initialize,
# notifications/initialized, tools/list and tools/call echo; 0 when every answer is right.
unix_curl_session() {
    local path="$1" head="$RESULTS/unix-curl.head" sid out
    local curl_args=(-sS --max-time 10 --unix-socket "$path" -H 'Content-Type: application/json'
        -H 'Accept: application/json, text/event-stream')
    local init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
    out="$(curl "${curl_args[@]}" -D "$head" -d "$init" http://localhost/mcp)" || return 1
    [[ "$out" == *'"protocolVersion":"2025-11-25"'* ]] || { echo "    initialize: $out"; return 1; }
    sid="$(grep -i '^mcp-session-id:' "$head" | cut -d' ' -f2 | tr -d '\r')"
    [ -n "$sid" ] || { echo "    initialize: no Mcp-Session-Id"; return 1; }
    curl_args+=(-H "Mcp-Session-Id: $sid")
    out="$(curl "${curl_args[@]}" -o /dev/null -w '%{http_code}' \
        -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' http://localhost/mcp)" || return 1
    [ "$out" = 202 ] || { echo "    notifications/initialized: $out"; return 1; }
    out="$(curl "${curl_args[@]}" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' \
        http://localhost/mcp)" || return 1
    [[ "$out" == *'"name":"echo"'* ]] || { echo "    tools/list: $out"; return 1; }
    out="$(curl "${curl_args[@]}" -d '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"curl over uds"}}}' \
        http://localhost/mcp)" || return 1
    [[ "$out" == *'"text":"curl over uds"'* ]] || { echo "    tools/call: $out"; return 1; }
}

passed=0
failed=0
failed_names=()

# run_client NAME KIND URL ARGS...: one client run (KIND ts, py, py-uds, ts-modern or rmcp-modern) in the
# background; its verdict
# file is RESULTS/NAME.rc. A cut run is `run_client NAME KIND proxy:K:N:ON_CUT ARGS...`.
run_client() {
    local name="$1" kind="$2" target="$3"
    shift 3
    (
        set +e
        local url="$target" proxy_pid=""
        if [[ "$target" == proxy:* ]]; then
            IFS=':' read -r _ k n on_cut <<<"$target"
            local up="${server_url#http://}"
            up="${up%%/*}"
            python3 "$CLIENTS/cut_proxy.py" --upstream "$up" --cut-after-events "$k" \
                --cut-streams "$n" --on-cut "$on_cut" --log-file "$RESULTS/$name.proxy.log" \
                >"$RESULTS/$name.proxy.out" 2>&1 &
            proxy_pid=$!
            local purl
            if ! purl="$(wait_for_url "$RESULTS/$name.proxy.out" "$proxy_pid" "cut_proxy")"; then
                echo 1 >"$RESULTS/$name.rc"
                exit 0
            fi
            url="${purl%/}/${server_url#http://*/}"
        fi
        local start=$SECONDS cmd
        case "$kind" in
            ts) cmd=(node "$TS_DIR/ts_client.mjs") ;;
            py) cmd=("$PY" "$CLIENTS/py_client.py") ;;
            py-uds) cmd=("$PY" "$CLIENTS/py_uds_client.py") ;;
            ts-modern) cmd=(node "$TS_MODERN_DIR/modern_ts_client.mjs") ;;
            rmcp-modern) cmd=("$RMCP_MODERN_BIN") ;;
        esac
        timeout "$CLIENT_TIMEOUT_S" "${cmd[@]}" --url "$url" --label "$name" "$@" \
            >"$RESULTS/$name.log" 2>&1
        local rc=$?
        [ "$rc" = 124 ] && echo "[$name] TIMEOUT after ${CLIENT_TIMEOUT_S}s" >>"$RESULTS/$name.log"
        if [ -n "$proxy_pid" ]; then
            kill "$proxy_pid" 2>/dev/null
            wait "$proxy_pid" 2>/dev/null
            # A cut run that cut nothing proved nothing.
            if [ "$rc" = 0 ] && ! grep -q '^cut_proxy cut ' "$RESULTS/$name.proxy.out"; then
                echo "[$name] FAILED: the proxy never cut a stream" >>"$RESULTS/$name.log"
                rc=1
            fi
        fi
        echo "$((SECONDS - start))" >"$RESULTS/$name.secs"
        echo "$rc" >"$RESULTS/$name.rc"
    ) &
    bg_jobs+=("$!")
    bg_names+=("$name")
}

# collect: waits for the background client runs and prints one verdict line each.
collect() {
    local i name rc
    for i in "${!bg_jobs[@]}"; do
        wait "${bg_jobs[$i]}" || true
        name="${bg_names[$i]}"
        rc="$(cat "$RESULTS/$name.rc" 2>/dev/null || echo 1)"
        if [ "$rc" = 0 ]; then
            passed=$((passed + 1))
            echo "clients: PASS $name ($(cat "$RESULTS/$name.secs")s) $(grep -m1 '\] ok:' "$RESULTS/$name.log" | sed 's/^\[[^]]*\] ok: //')"
        else
            failed=$((failed + 1))
            failed_names+=("$name")
            echo "clients: FAIL $name"
            tail -n 15 "$RESULTS/$name.log" | sed 's/^/    /'
            if [ -f "$RESULTS/$name.proxy.out" ]; then
                sed 's/^/    proxy: /' "$RESULTS/$name.proxy.out"
            fi
        fi
    done
    bg_jobs=()
    bg_names=()
}
bg_jobs=()
bg_names=()

# sequential NAME KIND TARGET ARGS...: one run, waited for (so --check-counter holds).
sequential() {
    run_client "$@"
    collect
}

CUT_ARGS=(--steps 10 --delay-ms 50)
# The clients wait the SSE `retry:` before each resume; the resuming stages' servers shorten it.
FAST_RETRY_MS=200
DEFAULT_RETRY_MS=1000  # tidemark's --sse-retry-ms default, checked once in the basic stage
FAST=(--sse-retry-ms "$FAST_RETRY_MS")

if want_stage basic; then
    start_server basic --tools demo
    sequential ts-2025-11-25 ts "$server_url" --check-counter --expect-retry-ms "$DEFAULT_RETRY_MS"
    sequential ts-2025-06-18 ts "$server_url" --check-counter --protocol-version 2025-06-18
    sequential ts-2025-03-26 ts "$server_url" --check-counter --protocol-version 2025-03-26
    sequential py-legacy-2025-11-25 py "$server_url" --check-counter --mode legacy
    sequential py-legacy-2025-06-18 py "$server_url" --check-counter --mode legacy \
        --protocol-version 2025-06-18
    sequential py-legacy-2025-03-26 py "$server_url" --check-counter --mode legacy \
        --protocol-version 2025-03-26
    sequential py-auto py "$server_url" --check-counter --mode auto --expect-era "$py_auto_era"
    stop_server basic
fi

if want_stage cut; then
    start_server cut --tools demo "${FAST[@]}"
    for on_cut in close drain stall; do
        sequential "ts-cut-$on_cut" ts "proxy:3:1:$on_cut" "${CUT_ARGS[@]}" --check-counter \
            --min-resumes 1 --expect-retry-ms "$FAST_RETRY_MS"
    done
    sequential ts-cut-3-streams ts "proxy:2:3:close" "${CUT_ARGS[@]}" --check-counter \
        --min-resumes 3
    # The Python SDK (2.3.0) survives one drop per call: on a second drop it resumes from a
    # stale Last-Event-ID (duplicates) and gives up after two, so one cut per call here.
    for on_cut in close drain stall; do
        sequential "py-cut-$on_cut" py "proxy:3:1:$on_cut" "${CUT_ARGS[@]}" --check-counter \
            --min-resumes 1 --mode legacy
    done
    stop_server cut
fi

if want_stage epoll; then
    start_server epoll --tools demo --driver epoll "${FAST[@]}"
    sequential epoll-ts ts "$server_url" --check-counter
    sequential epoll-py py "$server_url" --check-counter --mode legacy
    sequential epoll-ts-cut ts "proxy:3:1:close" "${CUT_ARGS[@]}" --check-counter --min-resumes 1
    sequential epoll-py-cut py "proxy:3:1:close" "${CUT_ARGS[@]}" --check-counter \
        --min-resumes 1 --mode legacy
    stop_server epoll
fi

if want_stage threads; then
    start_server threads --tools demo --threads 2 "${FAST[@]}"
    for i in 1 2 3 4; do
        run_client "threads-ts-$i" ts "$server_url"
        run_client "threads-py-$i" py "$server_url" --mode legacy
    done
    run_client threads-ts-cut ts "proxy:3:1:close" "${CUT_ARGS[@]}" --min-resumes 1
    run_client threads-py-cut py "proxy:3:1:close" "${CUT_ARGS[@]}" --min-resumes 1 --mode legacy
    collect
    # Every run above called slow_counter exactly once, so the global counter must say 10.
    counter="$(timeout 60 node "$TS_DIR/ts_client.mjs" --url "$server_url" --get-counter 2>&1 || true)"
    if [ "$counter" = 10 ]; then
        passed=$((passed + 1))
        echo "clients: PASS threads-counter (counter=10 after 10 slow_counter calls on 2 threads)"
    else
        failed=$((failed + 1))
        failed_names+=("threads-counter")
        echo "clients: FAIL threads-counter: expected 10, got: $counter"
    fi
    stop_server threads
fi

if want_stage migration; then
    # The real client under the migration boundary (CONTRACT §4, issue 4): slow_counter's stream
    # is cut after 3 events and, as soon as the SDK reports the drop, the same client calls echo.
    # Under `strict` that echo lands while the stream is owed, so the server holds it until the
    # SDK's resume (GET + Last-Event-ID, after `retry:`) has flushed the replay (up to
    # --owed-wait-ms, default 2000); the client logs the order of the two results and the echo's
    # latency (reported, not asserted). This stage proves that the real client COMPLETES under
    # the boundary (both results, progress 1..10 once each, one POST, one execution) -- not that
    # the boundary fires: the TS SDK never re-POSTs, so `off` must pass the same checks. The
    # strict run at the default retry (1000 ms) checks the default pairing with --owed-wait-ms:
    # a resume slower than the hold would turn the held echo into a 409 and fail the run.
    MIGRATION_ARGS=("${CUT_ARGS[@]}" --scenario cut-with-echo --check-counter --min-resumes 1)
    start_server migration-strict --tools demo --migration-policy strict "${FAST[@]}"
    sequential ts-migration-strict ts "proxy:3:1:close" "${MIGRATION_ARGS[@]}" \
        --expect-retry-ms "$FAST_RETRY_MS"
    stop_server migration-strict
    start_server migration-strict-default-retry --tools demo --migration-policy strict
    sequential ts-migration-strict-default-retry ts "proxy:3:1:close" "${MIGRATION_ARGS[@]}" \
        --expect-retry-ms "$DEFAULT_RETRY_MS"
    stop_server migration-strict-default-retry
    start_server migration-off --tools demo --migration-policy off "${FAST[@]}"
    sequential ts-migration-off ts "proxy:3:1:close" "${MIGRATION_ARGS[@]}" \
        --expect-retry-ms "$FAST_RETRY_MS"
    stop_server migration-off
fi

if want_stage example; then
    # The library embedding example: its own binary with one tool, `reverse`, and tidemark's flags.
    example_built=1
    if [ -z "$example_cmd" ]; then
        if [ "$build" = 1 ] \
            && ! (cd "$ROOT" && cargo build --release --quiet --example custom_tool); then
            failed=$((failed + 1))
            failed_names+=("example-build")
            echo "clients: FAIL example-build (cargo build --release --example custom_tool)"
            example_built=0
        fi
        example_cmd="$ROOT/target/release/examples/custom_tool"
    fi
    if [ "$example_built" = 1 ]; then
        launch_server example "$example_cmd" "127.0.0.1:$(free_port)"
        sequential example-ts-2025-11-25 ts "$server_url" --scenario reverse \
            --protocol-version 2025-11-25
        sequential example-ts-2025-06-18 ts "$server_url" --scenario reverse \
            --protocol-version 2025-06-18
        sequential example-py-legacy py "$server_url" --scenario reverse --mode legacy
        stop_server example
    fi
fi

if want_stage modern; then
    # The 2026-07-28 era (issue 10): each client connects by server/discover and must end in
    # 2026-07-28; greet's elicitation must come back as an InputRequiredResult (no server->client
    # request in this era) that the SDK answers and retries with inputResponses by itself.
    rmcp_built=1
    if [ "$build" = 1 ] || [ ! -x "$RMCP_MODERN_BIN" ]; then
        if ! (cd "$ROOT" && CARGO_TARGET_DIR="$RMCP_MODERN_TARGET" cargo build --release --quiet \
            --manifest-path tests/clients/rmcp_modern/Cargo.toml); then
            failed=$((failed + 1))
            failed_names+=("modern-rmcp-build")
            echo "clients: FAIL modern-rmcp-build (cargo build --release --manifest-path tests/clients/rmcp_modern/Cargo.toml)"
            rmcp_built=0
        fi
    fi
    MODERN_ARGS=(--check-counter --steps 3)
    start_server modern --tools demo
    sequential modern-py py "$server_url" "${MODERN_ARGS[@]}" --mode sdk-default --expect-era modern \
        --greet
    sequential modern-ts-auto ts-modern "$server_url" "${MODERN_ARGS[@]}" --negotiation auto
    sequential modern-ts-pin ts-modern "$server_url" "${MODERN_ARGS[@]}" --negotiation pin
    if [ "$rmcp_built" = 1 ]; then
        sequential modern-rmcp rmcp-modern "$server_url" "${MODERN_ARGS[@]}"
    fi
    stop_server modern
fi

if want_stage tls; then
    # TLS on the MCP listener (issue 18 item 6): the real clients over https://, trusting a test
    # CA through the variables each runtime reads.
    TLS_DIR="$RESULTS/tls"
    make_test_pki "$TLS_DIR" "tidemark clients test CA"
    start_server tls --tools demo --threads 2 --tls-cert "$TLS_DIR/cert.pem" \
        --tls-key "$TLS_DIR/key.pem"
    case "$server_url" in
        https://*) ;;
        *)
            echo "clients: FAIL tls-banner: the server did not announce https: $server_url"
            failed=$((failed + 1))
            failed_names+=("tls-banner")
            ;;
    esac
    export NODE_EXTRA_CA_CERTS="$TLS_DIR/ca.pem" SSL_CERT_FILE="$TLS_DIR/ca.pem"
    sequential tls-ts ts "$server_url" --check-counter
    sequential tls-ts-modern ts-modern "$server_url" --check-counter --steps 3 --negotiation pin
    sequential tls-py-legacy py "$server_url" --check-counter --mode legacy
    sequential tls-py-modern py "$server_url" --check-counter --steps 3 --mode sdk-default \
        --expect-era modern
    unset NODE_EXTRA_CA_CERTS SSL_CERT_FILE
    stop_server tls
fi

if want_stage auth; then
    # Issue 18: a static bearer token. The tokens are made up here (the file is the server's).
    AUTH_TOKENS="$RESULTS/auth-tokens"
    printf '# clients.sh auth stage\nclients-token-%s py-client\n' "$$" >"$AUTH_TOKENS"
    start_server auth --tools demo --auth-tokens "$AUTH_TOKENS"
    # Without the token: 401 with the challenge, or the runs below could not fail for auth.
    if python3 - "$server_url" <<'PY'
import sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1], data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
    headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
try:
    urllib.request.urlopen(req, timeout=10)
    sys.exit(1)
except urllib.error.HTTPError as e:
    challenge = e.headers.get("WWW-Authenticate", "")
    sys.exit(0 if e.code == 401 and challenge.startswith("Bearer resource_metadata=") else 1)
PY
    then
        passed=$((passed + 1))
        echo "clients: PASS auth-no-token (401 with the Bearer challenge)"
    else
        failed=$((failed + 1))
        failed_names+=("auth-no-token")
        echo "clients: FAIL auth-no-token (expected 401 with WWW-Authenticate: Bearer resource_metadata=...)"
    fi
    AUTH_ARGS=(--check-counter --bearer-token "clients-token-$$")
    sequential auth-py-legacy py "$server_url" "${AUTH_ARGS[@]}" --mode legacy
    sequential auth-py-modern py "$server_url" "${AUTH_ARGS[@]}" --mode sdk-default \
        --expect-era modern
    stop_server auth
fi

if want_stage unix; then
    # Issue 42 §3. A short path: a socket's path is at most 107 bytes, whatever ROOT is.
    UDS="${TMPDIR:-/tmp}/tidemark-clients-$$.sock"
    unix_started=$SECONDS
    launch_unix_server "$UDS" --tools demo --threads 2
    if unix_curl_session "$UDS"; then
        passed=$((passed + 1))
        echo "clients: PASS unix-curl (initialize, tools/list, tools/call over --unix-socket)"
    else
        failed=$((failed + 1))
        failed_names+=("unix-curl")
        echo "clients: FAIL unix-curl"
    fi
    sequential unix-py-legacy py-uds http://localhost/mcp --socket "$UDS" --mode legacy
    sequential unix-py-auto py-uds http://localhost/mcp --socket "$UDS" --mode auto \
        --expect-era modern
    stop_server unix
    echo "clients: unix stage took $((SECONDS - unix_started))s"
fi

if [ "$failed" -gt 0 ]; then
    echo "clients: failed: ${failed_names[*]}"
fi
echo "clients: $passed passed, $failed failed"
[ "$failed" = 0 ]
