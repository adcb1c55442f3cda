#!/usr/bin/env bash
# Usage: scripts/bridge.sh [--only STAGE[,STAGE...]] [--no-build] [--server-cmd CMD] [--help]
#
# End-to-end tests of tidemark's bridge (`--upstream`): tidemark in front of other MCP servers,
# driven by the official SDK clients and by raw HTTP. Installs, idempotently, into .cache/: Node 22
# (scripts/setup-node.sh), the TS SDK clients (.cache/ts-clients, as scripts/clients.sh does),
# @modelcontextprotocol/server-everything and the TS SDK pinned by tests/bridge/package-lock.json
# (.cache/bridge-npm), the Python venv .cache/venv (tests/clients/requirements.txt, as clients.sh
# creates it, plus tests/bridge/requirements.txt: mcp-server-time); builds tidemark (cargo build
# --release); then:
#   everything  --upstream 'stdio:node .../server-everything/dist/index.js stdio':
#               tests/bridge/everything_client.mjs (official TS SDK) lists tools, calls echo and
#               get-sum, trigger-long-running-operation (progress 1..5 once each, in order),
#               trigger-sampling-request, trigger-elicitation-request and get-roots-list (answered
#               by the client's handlers; the results must carry the answers), cancels a running
#               call, lists and reads resources (static and templated), lists and gets a prompt,
#               completes a prompt argument; once directly and once through cut_proxy.py (the
#               long-running call's stream is cut and must be resumed by the SDK)
#   sessions    per-session tool tables and tool filters (issue 22 items 3, 2), server-everything
#               behind tidemark, tests/bridge/everything_sessions.mjs (official TS SDK): a probe
#               client without capabilities connects first, then one declaring elicitation; in
#               turns each lists (the elicitor: the probe's tools + trigger-elicitation-request)
#               and calls (the elicitor's trigger-elicitation-request runs and carries its
#               handler's answer; the probe's is refused -32602 unknown tool; echo for both).
#               Then a second tidemark with --upstream-allow-tools '*=echo,get-*,trigger-*,
#               toggle-*' and --upstream-deny-tools '*=trigger-*,get-e?v': its list is the
#               unfiltered one's minus exactly the 5 filtered tools, each remaining tool's JSON
#               (annotations included) unchanged, each filtered tool's call refused -32602
#   time        --upstream 'stdio:.cache/venv/bin/mcp-server-time --local-timezone UTC': the
#               Python SDK client (tests/bridge/py_bridge_client.py --scenario time) lists the
#               tools and calls get_current_time and convert_time
#   counter     --upstream 'stdio:python tests/bridge/counter_server.py' (COUNTER_FILE through
#               --upstream-env): the unchanged tests/clients/ts_client.mjs and py_client.py (every
#               protocol version, --check-counter), directly and through tests/clients/cut_proxy.py
#               (close, drain, stall; 3 drops in one call; cut-with-echo), plus the prompt,
#               resource and completion of the counter server; after each run the counter file
#               must have risen by exactly one per slow_counter call, and once every session is
#               deleted no upstream process may be left. Then the same clients concurrently on
#               --threads 2 (counter += 10 exactly), and on --upstream-isolation shared (at most
#               one child per core)
#   retry       raw HTTP (tests/bridge/raw_checks.py --scenario retry): drop a slow_counter
#               stream after its first progress, re-POST it -> 409 + Last-Event-ID, GET from the
#               hint -> the rest; resume from the client's own id -> exactly the tail;
#               Idempotency-Key retry -> the first execution replayed; counter +1 per distinct call
#   faults      raw HTTP: crash_after (-32603 naming the upstream and exit status 3, then the
#               session goes on with a respawned child), garbage on the child's stdout (skipped
#               and logged; calls go on), kill -9 of the child mid-call (-32603),
#               notifications/cancelled reaches the upstream (its call log) and ends the call's
#               stream, DELETE ends the session's child; hang on a server with
#               --upstream-timeout-secs 2 (-32603 in ~2 s, cancelled upstream); and
#               --upstream-max-processes 1: a second session's initialize gets 503, and the
#               slot frees after DELETE
#   http        --upstream http://127.0.0.1:PORT/mcp fronting tests/bridge/http_counter_server.py
#               (official Python SDK, Streamable HTTP, resumable): ts_client.mjs and py_client.py
#               directly and through cut_proxy.py, the extras, and the raw retry scenario; the
#               counter rises once per call; once every client session is deleted the upstream
#               holds no session (its GET /debug/sessions)
#   multi       two upstreams a=stdio:counter_server.py and t=stdio:mcp-server-time:
#               py_bridge_client.py --scenario multi (a__echo, a__slow_counter, t__get_current_time,
#               a__greeting, a+counter://value; no unprefixed names)
#   modern      an HTTP upstream of the 2026-07-28 revision (issue 22 item 1):
#               tests/bridge/py_modern_server.py (official Python SDK, MCPServer) behind a gate that
#               refuses the legacy era (initialize 404 -32601), then the same server serving both
#               eras (--both); each time tidemark --upstream URL (auto: server/discover, spoken to in
#               2026-07-28) with py_client.py --greet --check-counter in legacy mode (the upstream's
#               InputRequiredResult asked as a server->client request on the call's stream) and in
#               auto mode (2026-07-28 in front: tidemark's own InputRequiredResult), ts_client.mjs,
#               modern_ts_client.mjs (TypeScript SDK v2, pinned to 2026-07-28, greet's input round),
#               and ts_client.mjs through cut_proxy.py (resumed at tidemark, the upstream call run
#               once); the counter rises once per call; the upstream's request log holds no
#               initialize, no Mcp-Session-Id and only MCP-Protocol-Version 2026-07-28; then
#               rmcp (loadtest/peer-rmcp --modern-only, built into target/peer-rmcp: stateless,
#               2026-07-28 only) with py_client.py legacy and auto, ts_client.mjs,
#               modern_ts_client.mjs (--check-counter: get_counter rises once per call) and
#               py_bridge_client.py --scenario headers in both modes (`route`'s x-mcp-header
#               arguments reach rmcp as Mcp-Param-* headers, which it checks)
#   reload      upstreams changed without a restart (issue 22 item 7): tidemark --config FILE with
#               [[upstream]] a=counter_server.py and t=mcp-server-time (prefix always);
#               py_bridge_client.py --scenario reload (official Python SDK) starts a slow a call,
#               rewrites FILE (a removed, t kept, b=counter_server.py added) and sends SIGHUP: the
#               session gets tools/list_changed, the running call ends with its result, the new
#               set is listed and callable in the same session, a's tools are refused, the
#               counter rose once; afterwards no child of the removed upstream is left
# Every stage's tidemark must survive its stage, and on SIGTERM it must end all its upstream
# processes (checked: no child of it alive 3 s after it exits; the faults stage leaves two
# sessions open for this).
#
#   --only STAGES       run only these stages (comma-separated: everything,sessions,time,counter,
#                       retry,faults,http,multi,modern,reload)
#   --no-build          do not run cargo build (use the existing target/release/tidemark)
#   --server-cmd CMD    start CMD instead of target/release/tidemark (the flags are appended; CMD
#                       must print tidemark's first line)
#
# Prints one PASS/FAIL line per run and a final `bridge: N passed, M failed`; logs (client output,
# each tidemark's stdout/stderr, proxy logs, counter files) are in .cache/bridge-results/. Exit 0
# only when every run passed. Servers, upstreams and proxies are killed on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
CLIENTS="$ROOT/tests/clients"
BRIDGE="$ROOT/tests/bridge"
RESULTS="$CACHE/bridge-results"
TS_DIR="$CACHE/ts-clients"
NPM_DIR="$CACHE/bridge-npm"
VENV="$CACHE/venv"
# rmcp serving 2026-07-28 (stage modern): its own workspace, built where scripts/compare.sh
# builds it.
RMCP_PEER_TARGET="$ROOT/target/peer-rmcp"
RMCP_PEER_BIN="$RMCP_PEER_TARGET/release/tidemark-peer-rmcp"
ALL_STAGES="everything,sessions,time,counter,retry,faults,http,multi,modern,reload"
START_TIMEOUT_S=30
CLIENT_TIMEOUT_S=120
CHILD_EXIT_S=3

usage() { sed -n '2,96s/^# \{0,1\}//p' "$0"; }

only="$ALL_STAGES"
build=1
server_cmd=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --only) only="${2:?--only needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --server-cmd) server_cmd="${2:?--server-cmd needs a value}"; shift 2 ;;
        --help) usage; exit 0 ;;
        *) echo "bridge.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
IFS=',' read -r -a stages <<<"$only"
for s in "${stages[@]}"; do
    case ",$ALL_STAGES," in
        *",$s,"*) ;;
        *) echo "bridge.sh: unknown stage '$s' (known: $ALL_STAGES)" >&2; exit 2 ;;
    esac
done
want_stage() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# ---- installs (idempotent) ----------------------------------------------------------------
# shellcheck source=SCRIPTDIR/setup-node.sh
source "$ROOT/scripts/setup-node.sh"
NODE="$TIDEMARK_NODE22_BIN/node"

SCRIPT_NAME=bridge.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"

# The TS SDK clients of tests/clients, exactly as scripts/clients.sh installs them.
npm_ci_pinned "$CLIENTS" "$TS_DIR" @modelcontextprotocol/sdk
# ESM resolves imports next to the script, so each client runs from its install directory.
cp "$CLIENTS/ts_client.mjs" "$TS_DIR/ts_client.mjs"

# server-everything and the TS SDK for everything_client.mjs, pinned by tests/bridge's lock file.
npm_ci_pinned "$BRIDGE" "$NPM_DIR" @modelcontextprotocol/server-everything
cp "$BRIDGE/everything_client.mjs" "$NPM_DIR/everything_client.mjs"
cp "$BRIDGE/everything_sessions.mjs" "$NPM_DIR/everything_sessions.mjs"
EVERYTHING_JS="$NPM_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

# The TypeScript SDK v2 client of the 2026-07-28 era, as scripts/clients.sh installs it (stage
# modern only).
TS_MODERN_DIR="$CACHE/ts-modern"
if want_stage modern; then
    npm_ci_pinned "$CLIENTS/ts_modern" "$TS_MODERN_DIR" @modelcontextprotocol/client
    cp "$CLIENTS/modern_ts_client.mjs" "$TS_MODERN_DIR/modern_ts_client.mjs"
fi

# The venv of scripts/clients.sh (same creation and marker), plus mcp-server-time.
pip_install_pinned "$VENV" "$CLIENTS/requirements.txt" tidemark-requirements.txt
pip_install_pinned "$VENV" "$BRIDGE/requirements.txt" tidemark-bridge-requirements.txt \
    bin/mcp-server-time
PY="$VENV/bin/python"
TIME_SERVER="$VENV/bin/mcp-server-time"

if [ -z "$server_cmd" ]; then
    if [ "$build" = 1 ]; then
        (cd "$ROOT" && cargo build --release --quiet)
    fi
    server_cmd="$ROOT/target/release/tidemark"
fi

# ---- process bookkeeping ------------------------------------------------------------------
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
pids=()
cleanup() {
    local p kids k
    for p in "${pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            kids="$(pgrep -P "$p" || true)"
            kill "$p" 2>/dev/null || true
            wait "$p" 2>/dev/null || true
            for k in $kids; do kill -9 "$k" 2>/dev/null || true; done
        fi
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

passed=0
failed=0
failed_names=()
# pass WORDS...: one PASS line. fail NAME [WORDS...]: one FAIL line, NAME counted as failed.
pass() { passed=$((passed + 1)); echo "bridge: PASS $*"; }
fail() {
    local name="$1" why
    shift
    why="$*"
    failed=$((failed + 1))
    failed_names+=("$name")
    echo "bridge: FAIL $name${why:+: $why}"
}

# start_server NAME FLAGS...: tidemark (or --server-cmd) on a kernel-chosen port; sets
# server_pid, server_url, server_name. A server that does not start is one FAIL, and the stage's
# runs are skipped (server_url empty).
start_server() {
    local name="$1"
    shift
    server_name="$name"
    server_url=""
    printf '%q ' $server_cmd --listen 127.0.0.1:0 "$@" >"$RESULTS/server-$name.cmdline"
    # shellcheck disable=SC2086  # server_cmd is a command line by design
    $server_cmd --listen 127.0.0.1:0 "$@" >"$RESULTS/server-$name.stdout" \
        2>"$RESULTS/server-$name.stderr" &
    server_pid=$!
    pids+=("$server_pid")
    if ! server_url="$(wait_for_url "$RESULTS/server-$name.stdout" "$server_pid" \
        "server $name")"; then
        server_url=""
        fail "server-$name-start" "$(tail -n 5 "$RESULTS/server-$name.stderr" | tr '\n' ' ')"
        return 0
    fi
    echo "bridge: server $name: $(head -n 1 "$RESULTS/server-$name.stdout")"
}

# children_of PID: its child pids, one a line.
children_of() { pgrep -P "$1" || true; }

# stop_server: SIGTERM to tidemark; it must have been alive (it survived the stage) and must end
# every upstream process of its own within CHILD_EXIT_S after exiting.
stop_server() {
    local name="$server_name" kids k left=""
    [ -n "$server_url" ] || return 0
    if ! kill -0 "$server_pid" 2>/dev/null; then
        fail "server-$name-survived" "tidemark died during the stage; stderr tail: $(
            tail -n 5 "$RESULTS/server-$name.stderr" | tr '\n' ' ')"
        return 0
    fi
    kids="$(children_of "$server_pid")"
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    for _ in $(seq $((CHILD_EXIT_S * 10))); do
        left=""
        for k in $kids; do
            # A zombie (exited, not yet reaped) counts as ended.
            if kill -0 "$k" 2>/dev/null \
                && [ "$(awk '{print $3}' "/proc/$k/stat" 2>/dev/null)" != Z ]; then
                left="$left $k"
            fi
        done
        [ -z "$left" ] && break
        sleep 0.1
    done
    if [ -n "$left" ]; then
        fail "server-$name-shutdown" "upstream process(es)$left still alive ${CHILD_EXIT_S}s" \
            "after tidemark exited (killed now)"
        for k in $left; do kill -9 "$k" 2>/dev/null || true; done
    else
        pass "server-$name-shutdown (tidemark alive through the stage; its" \
            "$(echo "$kids" | wc -w) upstream process(es) ended with it)"
    fi
}

# read_counter FILE: the shared counter (0 when the file does not exist yet).
read_counter() {
    local v=""
    [ -f "$1" ] && v="$(tr -d ' \n' <"$1")"
    echo "${v:-0}"
}

# run_client NAME KIND TARGET ARGS...: one run in the background; verdict in RESULTS/NAME.rc.
# KIND: ts (ts_client.mjs), py (py_client.py), ev (everything_client.mjs), evs
# (everything_sessions.mjs), pyb
# (py_bridge_client.py), raw (raw_checks.py). TARGET is a URL or proxy:K:N:ON_CUT (cut_proxy.py in
# front of the server). With `expect_delta` set (and `counter_file`), the counter file must rise by
# exactly that much during the run (only for runs that are alone on their upstream).
run_client() {
    local name="$1" kind="$2" target="$3"
    shift 3
    local delta_wanted="${expect_delta:-}" cfile="${counter_file:-}"
    (
        set +e
        local url="$target" proxy_pid="" before=""
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
            ts) cmd=("$NODE" "$TS_DIR/ts_client.mjs") ;;
            ts-modern) cmd=("$NODE" "$TS_MODERN_DIR/modern_ts_client.mjs") ;;
            py) cmd=("$PY" "$CLIENTS/py_client.py") ;;
            ev) cmd=("$NODE" "$NPM_DIR/everything_client.mjs") ;;
            evs) cmd=("$NODE" "$NPM_DIR/everything_sessions.mjs") ;;
            pyb) cmd=("$PY" "$BRIDGE/py_bridge_client.py") ;;
            raw) cmd=("$PY" "$BRIDGE/raw_checks.py") ;;
        esac
        [ -n "$delta_wanted" ] && before="$(read_counter "$cfile")"
        timeout "$CLIENT_TIMEOUT_S" "${cmd[@]}" --url "$url" --label "$name" "$@" \
            >"$RESULTS/$name.log" 2>&1
        local rc=$?
        [ "$rc" = 124 ] && echo "[$name] TIMEOUT after ${CLIENT_TIMEOUT_S}s" >>"$RESULTS/$name.log"
        if [ -n "$proxy_pid" ]; then
            kill "$proxy_pid" 2>/dev/null
            wait "$proxy_pid" 2>/dev/null
            if [ "$rc" = 0 ] && ! grep -q '^cut_proxy cut ' "$RESULTS/$name.proxy.out"; then
                echo "[$name] FAILED: the proxy never cut a stream" >>"$RESULTS/$name.log"
                rc=1
            fi
        fi
        if [ -n "$delta_wanted" ]; then
            local after
            after="$(read_counter "$cfile")"
            if [ "$((after - before))" != "$delta_wanted" ]; then
                echo "[$name] FAILED: the upstream's counter file rose by $((after - before))" \
                    "($before -> $after), expected $delta_wanted (a call ran twice or not at all" \
                    "upstream)" >>"$RESULTS/$name.log"
                rc=1
            else
                echo "[$name] counter file $before -> $after (+$delta_wanted as expected)" \
                    >>"$RESULTS/$name.log"
            fi
        fi
        echo "$((SECONDS - start))" >"$RESULTS/$name.secs"
        echo "$rc" >"$RESULTS/$name.rc"
    ) &
    bg_jobs+=("$!")
    bg_names+=("$name")
}

# collect: waits for the background runs and prints one verdict line each.
collect() {
    local i name rc
    for i in "${!bg_jobs[@]}"; do
        wait "${bg_jobs[$i]}" || true
        name="${bg_names[$i]}"
        rc="$(cat "$RESULTS/$name.rc" 2>/dev/null || echo 1)"
        if [ "$rc" = 0 ]; then
            pass "$name ($(cat "$RESULTS/$name.secs")s) $(grep -m1 '\] ok:' "$RESULTS/$name.log" \
                | sed 's/^\[[^]]*\] ok: //' | cut -c1-300)"
        else
            fail "$name"
            tail -n 25 "$RESULTS/$name.log" | sed 's/^/    /'
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

# sequential NAME KIND TARGET ARGS...: one run, waited for. counted: the same, and the counter
# file must rise by exactly one (the run calls slow_counter once). uncounted: must not rise.
sequential() { run_client "$@"; collect; }
counted() { expect_delta=1 run_client "$@"; collect; }
uncounted() { expect_delta=0 run_client "$@"; collect; }
expect_delta=""
counter_file=""

# check_no_children WHAT: after every session was deleted (per-session isolation), no upstream
# process of the current server may be left (within CHILD_EXIT_S).
check_no_children() {
    local kids=""
    for _ in $(seq $((CHILD_EXIT_S * 10))); do
        kids="$(children_of "$server_pid" | tr '\n' ' ')"
        [ -z "${kids// /}" ] && break
        sleep 0.1
    done
    if [ -z "${kids// /}" ]; then
        pass "$1 (no upstream process left after every session was deleted)"
    else
        fail "$1" "upstream process(es) $kids still running ${CHILD_EXIT_S}s after every session" \
            "was deleted: $(for k in $kids; do tr '\0' ' ' <"/proc/$k/cmdline" 2>/dev/null; echo
            done | head -3 | tr '\n' '|')"
    fi
}

# check_counter_total WHAT EXPECTED: the counter file after concurrent runs.
check_counter_total() {
    local got
    got="$(read_counter "$counter_file")"
    if [ "$got" = "$2" ]; then
        pass "$1 (counter file = $got)"
    else
        fail "$1" "counter file is $got, expected $2 (an upstream call ran twice or not at all)"
    fi
}

CUT_ARGS=(--steps 10 --delay-ms 50)
FAST_RETRY_MS=200
FAST=(--sse-retry-ms "$FAST_RETRY_MS")
COUNTER_UP="stdio:$PY $BRIDGE/counter_server.py"
TIME_UP="stdio:$TIME_SERVER --local-timezone UTC"

# The unchanged clients of tests/clients against a server fronting the counter server, one at a
# time, each counted (PREFIX names the runs).
counter_suite() {
    local p="$1"
    counted "$p-ts-2025-11-25" ts "$server_url" --check-counter --expect-retry-ms "$FAST_RETRY_MS"
    counted "$p-ts-2025-06-18" ts "$server_url" --check-counter --protocol-version 2025-06-18
    counted "$p-ts-2025-03-26" ts "$server_url" --check-counter --protocol-version 2025-03-26
    counted "$p-py-legacy" py "$server_url" --check-counter --mode legacy
    counted "$p-py-legacy-2025-06-18" py "$server_url" --check-counter --mode legacy \
        --protocol-version 2025-06-18
    for on_cut in close drain stall; do
        counted "$p-ts-cut-$on_cut" ts "proxy:3:1:$on_cut" "${CUT_ARGS[@]}" --check-counter \
            --min-resumes 1
    done
    counted "$p-ts-cut-3-streams" ts "proxy:2:3:close" "${CUT_ARGS[@]}" --check-counter \
        --min-resumes 3
    # The Python SDK (2.3.0) survives one drop per call (see scripts/clients.sh).
    for on_cut in close drain stall; do
        counted "$p-py-cut-$on_cut" py "proxy:3:1:$on_cut" "${CUT_ARGS[@]}" --check-counter \
            --min-resumes 1 --mode legacy
    done
    counted "$p-ts-cut-with-echo" ts "proxy:3:1:close" "${CUT_ARGS[@]}" --scenario cut-with-echo \
        --check-counter --min-resumes 1
    uncounted "$p-extras" pyb "$server_url" --scenario extras --counter-file "$counter_file"
}

if want_stage everything; then
    start_server everything --upstream "stdio:$NODE $EVERYTHING_JS stdio" "${FAST[@]}"
    if [ -n "$server_url" ]; then
        sequential everything-ts ev "$server_url"
        # The long-running call's stream (progress events) is cut after 2; the SDK must resume.
        sequential everything-ts-cut ev "proxy:2:1:close" --skip cancel
        check_no_children everything-children
        stop_server
    fi
fi

if want_stage sessions; then
    EVERYTHING_UP="stdio:$NODE $EVERYTHING_JS stdio"
    start_server sessions --upstream "$EVERYTHING_UP" "${FAST[@]}"
    if [ -n "$server_url" ]; then
        sequential sessions-ts evs "$server_url" --scenario sessions
        # The unfiltered server stays up as the filtered one's reference.
        unfiltered=("$server_name" "$server_pid" "$server_url")
        start_server filter --upstream "$EVERYTHING_UP" "${FAST[@]}" \
            --upstream-allow-tools '*=echo,get-*,trigger-*,toggle-*' \
            --upstream-deny-tools '*=trigger-*,get-e?v'
        if [ -n "$server_url" ]; then
            sequential filter-ts evs "$server_url" --scenario filter \
                --compare-url "${unfiltered[2]}" --hidden \
                gzip-file-as-resource,simulate-research-query,trigger-long-running-operation,trigger-elicitation-request,get-env
            stop_server
        fi
        server_name="${unfiltered[0]}" server_pid="${unfiltered[1]}" server_url="${unfiltered[2]}"
        check_no_children sessions-children
        stop_server
    fi
fi

if want_stage time; then
    start_server time --upstream "$TIME_UP" "${FAST[@]}"
    if [ -n "$server_url" ]; then
        sequential time-py pyb "$server_url" --scenario time
        check_no_children time-children
        stop_server
    fi
fi

if want_stage counter; then
    counter_file="$RESULTS/counter-counter.txt"
    start_server counter --upstream "$COUNTER_UP" --upstream-env "COUNTER_FILE=$counter_file" \
        "${FAST[@]}"
    if [ -n "$server_url" ]; then
        counter_suite counter
        check_no_children counter-children
        # After the check: a 2026-07-28 client has no session, so its calls use the core's
        # upstream link, which lives as long as the core (stop_server ends it).
        counted counter-py-auto py "$server_url" --check-counter --mode auto --expect-era modern
        stop_server
    fi

    # Many sessions at once on two cores: every run calls slow_counter once.
    counter_file="$RESULTS/counter-threads.txt"
    start_server counter-threads --threads 2 --upstream "$COUNTER_UP" \
        --upstream-env "COUNTER_FILE=$counter_file" "${FAST[@]}"
    if [ -n "$server_url" ]; then
        for i in 1 2 3 4; do
            run_client "counter-threads-ts-$i" ts "$server_url"
            run_client "counter-threads-py-$i" py "$server_url" --mode legacy
        done
        run_client counter-threads-ts-cut ts "proxy:3:1:close" "${CUT_ARGS[@]}" --min-resumes 1
        run_client counter-threads-py-cut py "proxy:3:1:close" "${CUT_ARGS[@]}" --min-resumes 1 \
            --mode legacy
        collect
        check_counter_total counter-threads-total 10
        counted counter-threads-sequential-ts ts "$server_url" --check-counter
        check_no_children counter-threads-children
        stop_server
    fi

    # One shared child per core for all sessions.
    counter_file="$RESULTS/counter-shared.txt"
    start_server counter-shared --threads 2 --upstream-isolation shared --upstream "$COUNTER_UP" \
        --upstream-env "COUNTER_FILE=$counter_file" "${FAST[@]}"
    if [ -n "$server_url" ]; then
        counted counter-shared-ts ts "$server_url" --check-counter
        counted counter-shared-py py "$server_url" --check-counter --mode legacy
        counted counter-shared-ts-cut ts "proxy:3:1:close" "${CUT_ARGS[@]}" --check-counter \
            --min-resumes 1
        counted counter-shared-py-cut py "proxy:3:1:close" "${CUT_ARGS[@]}" --check-counter \
            --min-resumes 1 --mode legacy
        base="$(read_counter "$counter_file")"
        for i in 1 2 3; do
            run_client "counter-shared-ts-$i" ts "$server_url"
            run_client "counter-shared-py-$i" py "$server_url" --mode legacy
        done
        collect
        check_counter_total counter-shared-total "$((base + 6))"
        kids="$(children_of "$server_pid" | wc -w)"
        if [ "$kids" -ge 1 ] && [ "$kids" -le 2 ]; then
            pass "counter-shared-processes ($kids upstream process(es) for 2 cores, 10 sessions)"
        else
            fail counter-shared-processes \
                "$kids upstream processes with --upstream-isolation shared --threads 2 (want 1..2)"
        fi
        uncounted counter-shared-extras pyb "$server_url" --scenario extras \
            --counter-file "$counter_file"
        stop_server
    fi
fi

if want_stage retry; then
    counter_file="$RESULTS/counter-retry.txt"
    start_server retry --upstream "$COUNTER_UP" --upstream-env "COUNTER_FILE=$counter_file" \
        "${FAST[@]}"
    if [ -n "$server_url" ]; then
        expect_delta=3 run_client retry-raw raw "$server_url" --scenario retry \
            --counter-file "$counter_file"
        collect
        check_no_children retry-children
        stop_server
    fi
fi

if want_stage faults; then
    counter_file="$RESULTS/counter-faults.txt"
    call_log="$RESULTS/calls-faults.log"
    start_server faults --upstream "$COUNTER_UP" --upstream-env "COUNTER_FILE=$counter_file" \
        --upstream-env "COUNTER_CALL_LOG=$call_log" "${FAST[@]}"
    if [ -n "$server_url" ]; then
        for scenario in crash garbage kill cancel delete; do
            sequential "faults-$scenario" raw "$server_url" --scenario "$scenario" \
                --server-pid "$server_pid" --counter-file "$counter_file" --call-log "$call_log"
        done
        # The garbage line (written to the child's stdout, not its stderr) must have been logged.
        garbage_log="$(grep -F 'counter_server garbage tool' "$RESULTS/server-faults.stderr" \
            | grep -v 'stderr:' | head -n 1 | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-160 || true)"
        if [ -n "$garbage_log" ]; then
            pass "faults-garbage-logged ($garbage_log)"
        else
            fail faults-garbage-logged \
                "tidemark's stderr does not mention the upstream's non-JSON stdout line"
        fi
        counted faults-after-ts ts "$server_url" --check-counter
        check_no_children faults-children
        # Two sessions left open: tidemark's SIGTERM must end their children (stop_server).
        sequential faults-open-1 raw "$server_url" --scenario open --server-pid "$server_pid"
        sequential faults-open-2 raw "$server_url" --scenario open --server-pid "$server_pid"
        stop_server
    fi
    # --upstream-timeout-secs bounds every upstream request (the child's initialize too), so the
    # hang runs on a server of its own.
    start_server faults-timeout --upstream "$COUNTER_UP" \
        --upstream-env "COUNTER_FILE=$counter_file" --upstream-env "COUNTER_CALL_LOG=$call_log" \
        --upstream-timeout-secs 2 "${FAST[@]}"
    if [ -n "$server_url" ]; then
        sequential faults-hang raw "$server_url" --scenario hang --server-pid "$server_pid" \
            --call-log "$call_log"
        check_no_children faults-timeout-children
        stop_server
    fi
    start_server faults-cap --upstream "$COUNTER_UP" --upstream-env "COUNTER_FILE=$counter_file" \
        --upstream-max-processes 1 "${FAST[@]}"
    if [ -n "$server_url" ]; then
        sequential faults-max-processes raw "$server_url" --scenario max-processes \
            --server-pid "$server_pid"
        stop_server
    fi
fi

if want_stage http; then
    counter_file="$RESULTS/counter-http.txt"
    up_port="$(free_port)"
    COUNTER_FILE="$counter_file" "$PY" "$BRIDGE/http_counter_server.py" "$up_port" \
        --retry-ms "$FAST_RETRY_MS" >"$RESULTS/upstream-http.stdout" \
        2>"$RESULTS/upstream-http.stderr" &
    up_pid=$!
    pids+=("$up_pid")
    if ! up_url="$(wait_for_url "$RESULTS/upstream-http.stdout" "$up_pid" \
        "http_counter_server")"; then
        fail http-upstream-start "$(tail -n 5 "$RESULTS/upstream-http.stderr" | tr '\n' ' ')"
    else
        start_server http --upstream "$up_url" "${FAST[@]}"
        if [ -n "$server_url" ]; then
            counted http-ts ts "$server_url" --check-counter
            counted http-ts-2025-06-18 ts "$server_url" --check-counter \
                --protocol-version 2025-06-18
            counted http-py py "$server_url" --check-counter --mode legacy
            for on_cut in close stall; do
                counted "http-ts-cut-$on_cut" ts "proxy:3:1:$on_cut" "${CUT_ARGS[@]}" \
                    --check-counter --min-resumes 1
            done
            counted http-py-cut py "proxy:3:1:close" "${CUT_ARGS[@]}" --check-counter \
                --min-resumes 1 --mode legacy
            uncounted http-extras pyb "$server_url" --scenario extras --counter-file "$counter_file"
            expect_delta=3 run_client http-retry-raw raw "$server_url" --scenario retry \
                --counter-file "$counter_file"
            collect
            # Every client session was DELETEd: the bridge must have ended its upstream sessions.
            up_sessions=""
            for _ in $(seq $((CHILD_EXIT_S * 10))); do
                up_sessions="$(curl -s "${up_url%/mcp}/debug/sessions" | tr -dc '0-9')"
                [ "$up_sessions" = 0 ] && break
                sleep 0.1
            done
            if [ "$up_sessions" = 0 ]; then
                pass "http-upstream-sessions (no upstream session left once every client" \
                    "session was deleted)"
            else
                fail http-upstream-sessions "the upstream still holds ${up_sessions:-?} MCP" \
                    "session(s) ${CHILD_EXIT_S}s after every client session was deleted"
            fi
            stop_server
        fi
        if kill -0 "$up_pid" 2>/dev/null; then
            kill "$up_pid" 2>/dev/null || true
            wait "$up_pid" 2>/dev/null || true
        else
            fail http-upstream-survived "http_counter_server died; stderr: $(
                tail -n 5 "$RESULTS/upstream-http.stderr" | tr '\n' ' ')"
        fi
    fi
fi

if want_stage multi; then
    counter_file="$RESULTS/counter-multi.txt"
    start_server multi --upstream "a=$COUNTER_UP" --upstream "t=$TIME_UP" \
        --upstream-env "COUNTER_FILE=$counter_file" "${FAST[@]}"
    if [ -n "$server_url" ]; then
        sequential multi-py pyb "$server_url" --scenario multi --counter-file "$counter_file"
        check_no_children multi-children
        stop_server
    fi
fi

if want_stage reload; then
    counter_file="$RESULTS/counter-reload.txt"
    config="$RESULTS/reload.toml"
    next_config="$RESULTS/reload-next.toml"
    # upstream_table NAME SPEC: one [[upstream]] table, prefixed always (names stay NAME__tool
    # whatever the set's size).
    upstream_table() { printf '\n[[upstream]]\nname = "%s"\nspec = "%s"\nprefix = "always"\n' "$1" "$2"; }
    { upstream_table a "$COUNTER_UP"; upstream_table t "$TIME_UP"; } >"$config"
    { upstream_table t "$TIME_UP"; upstream_table b "$COUNTER_UP"; } >"$next_config"
    start_server reload --config "$config" --upstream-env "COUNTER_FILE=$counter_file" \
        --upstream-kill-grace-ms 500 "${FAST[@]}"
    if [ -n "$server_url" ]; then
        sequential reload-py pyb "$server_url" --scenario reload --counter-file "$counter_file" \
            --config "$config" --next-config "$next_config" --pid "$server_pid"
        # The removed upstream's child was stopped once its call finished, b's ended with the
        # client's DELETE: no counter_server child is left.
        left=""
        for _ in $(seq 50); do
            left="$(pgrep -P "$server_pid" -a | grep -c counter_server || true)"
            [ "$left" -eq 0 ] && break
            sleep 0.1
        done
        if [ "$left" -eq 0 ]; then
            pass "reload-removed-child-exited (no counter_server child left)"
        else
            fail "reload-removed-child-exited" "$left counter_server children of tidemark left"
        fi
        if grep -q 'SIGHUP: upstream set applied' "$RESULTS/server-reload.stderr"; then
            pass "reload-logged"
        else
            fail "reload-logged" "no 'SIGHUP: upstream set applied' in the server's log"
        fi
        stop_server
    fi
fi

if want_stage modern; then
    for variant in only both; do
        counter_file="$RESULTS/counter-modern-$variant.txt"
        up_port="$(free_port)"
        up_flags=()
        [ "$variant" = both ] && up_flags=(--both)
        COUNTER_FILE="$counter_file" "$PY" "$BRIDGE/py_modern_server.py" "$up_port" \
            "${up_flags[@]}" >"$RESULTS/upstream-modern-$variant.stdout" \
            2>"$RESULTS/upstream-modern-$variant.stderr" &
        up_pid=$!
        pids+=("$up_pid")
        if ! up_url="$(wait_for_url "$RESULTS/upstream-modern-$variant.stdout" "$up_pid" \
            "py_modern_server")"; then
            fail "modern-$variant-upstream-start" \
                "$(tail -n 5 "$RESULTS/upstream-modern-$variant.stderr" | tr '\n' ' ')"
            continue
        fi
        start_server "modern-$variant" --upstream "$up_url" "${FAST[@]}"
        if [ -n "$server_url" ]; then
            counted "modern-$variant-py-legacy" py "$server_url" --mode legacy --greet \
                --check-counter
            counted "modern-$variant-py-modern" py "$server_url" --mode auto --expect-era modern \
                --greet --check-counter
            counted "modern-$variant-ts" ts "$server_url" --check-counter
            counted "modern-$variant-ts-modern" ts-modern "$server_url" --check-counter \
                --steps 3 --negotiation pin
            counted "modern-$variant-ts-cut" ts "proxy:3:1:close" "${CUT_ARGS[@]}" \
                --check-counter --min-resumes 1
            # What the upstream saw: the revision only, never a session or an initialize.
            if verdict="$(curl -s "${up_url%/mcp}/debug/log" | python3 -c '
import json, sys
seen = json.load(sys.stdin)["requests"]
bad = [r for r in seen if r["method"] == "initialize" or r["session"] is not None
       or r["version"] != "2026-07-28"]
calls = sum(r["method"] == "tools/call" for r in seen)
first = seen[0]["method"] if seen else None
print(f"{len(seen)} requests, {calls} tools/call, first {first}")
sys.exit(1 if bad or first != "server/discover" else 0)
')"; then
                pass "modern-$variant-upstream-stateless ($verdict: all 2026-07-28, no session)"
            else
                fail "modern-$variant-upstream-stateless" "$verdict"
            fi
            stop_server
        fi
        kill "$up_pid" 2>/dev/null || true
        wait "$up_pid" 2>/dev/null || true
    done

    # The same translation in front of rmcp, the official Rust SDK, serving only 2026-07-28
    # (loadtest/peer-rmcp --modern-only: stateless, server/discover offers nothing else): the
    # demo tools, and `route`, whose x-mcp-header parameters rmcp checks against the body (a call
    # without its Mcp-Param-* headers is 400 -32020). Its counter is read by the clients
    # (--check-counter: get_counter rises by one per slow_counter call).
    rmcp_peer_built=1
    if [ "$build" = 1 ] || [ ! -x "$RMCP_PEER_BIN" ]; then
        if ! (cd "$ROOT" && CARGO_TARGET_DIR="$RMCP_PEER_TARGET" cargo build --release --quiet \
            --manifest-path loadtest/peer-rmcp/Cargo.toml); then
            fail "modern-rmcp-build" "cargo build --release --manifest-path loadtest/peer-rmcp/Cargo.toml"
            rmcp_peer_built=0
        fi
    fi
    if [ "$rmcp_peer_built" = 1 ]; then
        "$RMCP_PEER_BIN" --modern-only >"$RESULTS/upstream-modern-rmcp.stdout" \
            2>"$RESULTS/upstream-modern-rmcp.stderr" &
        up_pid=$!
        pids+=("$up_pid")
        if up_url="$(wait_for_url "$RESULTS/upstream-modern-rmcp.stdout" "$up_pid" "rmcp-peer")"
        then
            start_server modern-rmcp --upstream "$up_url" "${FAST[@]}"
            if [ -n "$server_url" ]; then
                sequential modern-rmcp-py-legacy py "$server_url" --mode legacy --check-counter
                sequential modern-rmcp-py-modern py "$server_url" --mode auto \
                    --expect-era modern --check-counter
                sequential modern-rmcp-ts ts "$server_url" --check-counter
                sequential modern-rmcp-ts-modern ts-modern "$server_url" --check-counter \
                    --steps 3 --negotiation pin --no-greet
                sequential modern-rmcp-headers-legacy pyb "$server_url" --scenario headers \
                    --mode legacy
                sequential modern-rmcp-headers-modern pyb "$server_url" --scenario headers \
                    --mode auto
                if grep -q 'era="2026-07-28"' "$RESULTS/server-modern-rmcp.stderr"; then
                    pass "modern-rmcp-era (tidemark chose 2026-07-28 toward rmcp)"
                else
                    fail "modern-rmcp-era" "no 'upstream era chosen … 2026-07-28' in the log"
                fi
                stop_server
            fi
        else
            fail "modern-rmcp-upstream-start" \
                "$(tail -n 5 "$RESULTS/upstream-modern-rmcp.stderr" | tr '\n' ' ')"
        fi
        kill "$up_pid" 2>/dev/null || true
        wait "$up_pid" 2>/dev/null || true
    fi
fi

if [ "$failed" -gt 0 ]; then
    echo "bridge: failed: ${failed_names[*]}"
fi
echo "bridge: $passed passed, $failed failed"
[ "$failed" = 0 ]
