#!/usr/bin/env bash
# Usage: scripts/connect.sh [--calls N] [--steps S] [--seed S] [--no-build] [--no-compare] [--help]
#
# The client-side bridge end to end (issue 42 item 4, docs/bridge.md "The client side: tidemark
# connect"): tests/clients/connect_driver.py, a local MCP client on stdio, runs N non-idempotent
# `slow_counter` calls (S progress events each) through a stdio-to-HTTP bridge whose server sits
# behind tests/clients/cut_proxy.py, which cuts every `tools/call` stream and every resumption at a
# random message (1..S+3, seeded: the same schedule for every bridge against one server), and
# closes every 4th `tools/call` POST before its response head (the call ran; the seed's hazard). It
# counts calls lost, answers and events duplicated, events lost, outcomes reported unknown
# (-31006) and executions beyond one per call (the server's own counter). Servers:
#   tidemark        target/debug/tidemark --tools demo (resumable, 409 hints)
#   python          tests/bridge/http_counter_server.py (official Python SDK, event store)
#   python-nostore  the same without an event store: no event ids, so nothing can be resumed
#   typescript      tests/connect/ts_counter_server.mjs (official TS SDK, InMemoryEventStore)
#   tidemark-modern the same binary with --owed-wait-ms 10, the driver speaking 2026-07-28
#                   (--modern: no session, no event ids): a cut stream or head is re-sent with
#                   the same Idempotency-Key, a re-send while the call runs waits 10 ms and is
#                   refused 409 -31004 (followed: re-sent after the backoff)
# Bridges: `tidemark connect` (must, against every server: every call answered (its result or
# -31006, no other error), nothing duplicated, every call run exactly once; against tidemark also
# every call answered with its result and no progress event lost; against tidemark-modern also
# every tools/call POST carrying a key, one key per call, re-sends and at least one 409 seen by
# the proxy), and mcp-remote (npm, pinned by tests/connect/package-lock.json; counted, not judged,
# not against tidemark-modern; --no-compare skips it).
# Installs, idempotently: Node 22 (scripts/setup-node.sh), tests/connect's npm packages into
# .cache/connect-npm, the Python venv .cache/venv (as scripts/bridge.sh). Builds the debug binary
# unless --no-build. CI size: N=8 calls (see the suite's wall time in docs/bridge.md). The longer run of
# docs/bridge.md: scripts/connect.sh --calls 100.
# Prints one `connect_driver …` line per (server, bridge) and `connect: N passed, M failed`;
# logs in .cache/connect-results/. Exit 0 only when every judged run passed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
CLIENTS="$ROOT/tests/clients"
RESULTS="$CACHE/connect-results"
NPM_DIR="$CACHE/connect-npm"
VENV="$CACHE/venv"
START_TIMEOUT_S=30
# How long the driver waits for an answer: tidemark connect must answer every call (a resume
# through repeated cuts takes a few backoffs); mcp-remote's wait only bounds the run (a call it
# loses is never answered: counted lost after this).
CONNECT_CALL_TIMEOUT_S=30
OTHER_CALL_TIMEOUT_S=3

usage() { sed -n '2,32s/^# \{0,1\}//p' "$0"; }

calls=8
steps=6
seed=42
build=1
compare=1
while [ "$#" -gt 0 ]; do
    case "$1" in
        --calls) calls="${2:?--calls needs a value}"; shift 2 ;;
        --steps) steps="${2:?--steps needs a value}"; shift 2 ;;
        --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --no-compare) compare=0; shift ;;
        --help) usage; exit 0 ;;
        *) echo "connect.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

# ---- installs (idempotent) ----------------------------------------------------------------
# shellcheck source=SCRIPTDIR/setup-node.sh
source "$ROOT/scripts/setup-node.sh"
NODE="$TIDEMARK_NODE22_BIN/node"
SCRIPT_NAME=connect.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
npm_ci_pinned "$ROOT/tests/connect" "$NPM_DIR" mcp-remote
cp "$ROOT/tests/connect/ts_counter_server.mjs" "$NPM_DIR/ts_counter_server.mjs"
MCP_REMOTE="$NPM_DIR/node_modules/mcp-remote/dist/proxy.js"
pip_install_pinned "$VENV" "$CLIENTS/requirements.txt" tidemark-requirements.txt
pip_install_pinned "$VENV" "$ROOT/tests/bridge/requirements.txt" tidemark-bridge-requirements.txt \
    bin/mcp-server-time
PY="$VENV/bin/python"
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --quiet --bin tidemark)
fi
TIDEMARK="$ROOT/target/debug/tidemark"

# ---- process bookkeeping ------------------------------------------------------------------
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD...: runs CMD in the background, its output in RESULTS/NAME.out; sets $url.
start() {
    local name="$1"
    shift
    "$@" >"$RESULTS/$name.out" 2>&1 &
    local pid=$!
    pids+=("$pid")
    url="$(wait_for_url "$RESULTS/$name.out" "$pid" "$name")"
}

# cutter NAME URL: a cut_proxy in front of URL's host:port, fresh (the schedule restarts at the
# seed); sets $cut_url (the same path through the proxy).
cutter() {
    local name="$1" target="$2" hostport path
    hostport="${target#http://}"
    path="/${hostport#*/}"
    hostport="${hostport%%/*}"
    start "$name" python3 "$CLIENTS/cut_proxy.py" --upstream "$hostport" --match tools-call \
        --cut-after-events 1 --cut-after-events-max "$((steps + 3))" --seed "$seed" \
        --cut-streams 100000 --cut-heads-every 4 --log-file "$RESULTS/$name.log"
    cut_url="${url%/}$path"
}

passed=0
failed=0
# recount LABEL SERVER-URL: when the run could not read the counter at its end (the bridge's
# session was stuck), read it through tidemark connect straight to the server (no proxy) and
# print the run's line again with the executions filled in.
recount() {
    local label="$1" before after
    [ "$(field executions)" = None ] || return 0
    before="$(field counter_before)"
    local saved="$line"
    line="$(python3 "$CLIENTS/connect_driver.py" --label "$label/recount" --calls 0 \
        -- "$TIDEMARK" connect "$2" 2>/dev/null || true)"
    after="$(field counter_before)"
    line="$saved"
    if [ -n "$before" ] && [ "$before" != None ] && [ -n "$after" ] && [ "$after" != None ]; then
        echo "  $label recounted: executions=$((after - before)) (server counter $before -> $after)"
    fi
}
# drive LABEL TIMEOUT BRIDGE-CMD...: one driver run (with the driver's flags in $driver_flags);
# its summary line in $line.
driver_flags=()
drive() {
    local label="$1" timeout_s="$2"
    shift 2
    line="$(python3 "$CLIENTS/connect_driver.py" --label "$label" --calls "$calls" --steps "$steps" \
        --delay-ms 20 --call-timeout-s "$timeout_s" ${driver_flags[@]+"${driver_flags[@]}"} \
        -- "$@" 2>"$RESULTS/$label.err" || true)"
    echo "${line:-connect_driver label=$label failed=no-output}"
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
judge() {
    local label="$1" ok=1 want
    shift
    for want in "$@"; do
        [ "$(field "${want%%=*}")" = "${want#*=}" ] || ok=0
    done
    if [ "$ok" = 1 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $label: wanted $*" >&2
    fi
}

# run_server NAME URL KIND: both bridges through a fresh proxy each (KIND tidemark|other).
run_server() {
    local name="$1" server_url="$2" resumes="$3"
    cutter "proxy-$name-connect" "$server_url"
    # --read-timeout-secs 5: the SDK servers send no keep-alive, and an answer stored in the
    # Python SDK's replay-to-live window (its streamable_http.py says so) reaches a resumed
    # stream only through the next resume. --reconnect-attempts 3: a call whose answer never
    # comes on any resume (seen with the TS SDK server) is reported -31006 within the driver's
    # wait (3 silent resumes of 5 s), not counted lost.
    drive "$name/tidemark-connect" "$CONNECT_CALL_TIMEOUT_S" "$TIDEMARK" connect "$cut_url" \
        --backoff-min-ms 50 --read-timeout-secs 5 --reconnect-attempts 3
    local common=(lost=0 errors=0 dup_answers=0 dup_events=0 double_executions=0)
    # Every call ran exactly once; only a server that decides retries (tidemark) can also give
    # the answer of a call whose response head was lost: elsewhere that call is -31006. A
    # progress event the SDK servers store inside their replay-to-live window is never sent
    # (lost_events, counted for both bridges); tidemark has no such window.
    if [ "$resumes" = tidemark ]; then
        judge "$name/tidemark-connect" "${common[@]}" lost_events=0 ok="$calls" executions="$calls"
    else
        judge "$name/tidemark-connect" "${common[@]}" executions="$calls"
    fi
    if [ "$compare" = 1 ]; then
        cutter "proxy-$name-mcp-remote" "$server_url"
        drive "$name/mcp-remote" "$OTHER_CALL_TIMEOUT_S" "$NODE" "$MCP_REMOTE" "$cut_url" --allow-http --transport http-only
        recount "$name/mcp-remote" "$server_url"
    fi
}

# posts_seen NAME: what the proxy NAME saw of `tools/call` POSTs (its log): posts, posts without
# an Idempotency-Key, distinct keys, 409 answers to them.
posts_seen() {
    local log="$RESULTS/$1.log"
    touch "$log"
    read -r posts keyless keys conflicts < <(awk '
        / > POST rpc=tools\/call / { posts++; for (i = 1; i <= NF; i++) if ($i ~ /^key=/) {
            if ($i == "key=None") keyless++; else if (!seen[$i]++) keys++ } }
        / < 409 .* for POST rpc=tools\/call/ { conflicts++ }
        END { print posts + 0, keyless + 0, keys + 0, conflicts + 0 }' "$log")
    echo "  $1: tools/call posts=$posts keyless=$keyless keys=$keys conflicts_409=$conflicts"
}

# run_modern URL: tidemark connect against a 2026-07-28 tidemark through a fresh proxy. Besides
# the counts of the legacy run: the proxy must have seen a key on every tools/call POST, one key
# per call (N slow_counter + 2 get_counter), re-sends (more posts than keys) and a 409 followed.
# --reconnect-attempts 20, --backoff-max-ms 200: every re-send's stream is cut too, and a
# re-send replays the call from its first event, so it brings something new only when the cut
# falls past what was already forwarded; the budget counts re-sends without progress.
run_modern() {
    cutter proxy-tidemark-modern-connect "$1"
    driver_flags=(--modern)
    drive tidemark-modern/tidemark-connect "$CONNECT_CALL_TIMEOUT_S" "$TIDEMARK" connect \
        "$cut_url" --backoff-min-ms 50 --backoff-max-ms 200 --read-timeout-secs 5 \
        --reconnect-attempts 20
    driver_flags=()
    posts_seen proxy-tidemark-modern-connect
    local label=tidemark-modern/tidemark-connect
    judge "$label" lost=0 errors=0 dup_answers=0 dup_events=0 double_executions=0 lost_events=0 \
        ok="$calls" executions="$calls"
    if [ "$keyless" = 0 ] && [ "$keys" = "$((calls + 2))" ] && [ "$posts" -gt "$keys" ] \
        && [ "$conflicts" -ge 1 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $label: wanted keyless=0 keys=$((calls + 2)) posts>keys conflicts_409>=1" >&2
    fi
}

mkdir -p "$RESULTS/tidemark" "$RESULTS/python" "$RESULTS/python-nostore" "$RESULTS/typescript" \
    "$RESULTS/tidemark-modern"
start tidemark "$TIDEMARK" --listen 127.0.0.1:0 --tools demo --threads 1
run_server tidemark "$url" tidemark
# Legacy era: a re-send carries its key, which tidemark matches first (CONTRACT §4 step 1), and a
# broken stream is resumed by GET, so no 409 is expected here (counted, not judged).
posts_seen proxy-tidemark-connect
start tidemark-modern "$TIDEMARK" --listen 127.0.0.1:0 --tools demo --threads 1 --owed-wait-ms 10
run_modern "$url"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
start python env COUNTER_FILE="$RESULTS/python.counter" "$PY" "$ROOT/tests/bridge/http_counter_server.py" "$(free_port)"
run_server python "$url" other
start python-nostore env COUNTER_FILE="$RESULTS/python-nostore.counter" "$PY" \
    "$ROOT/tests/bridge/http_counter_server.py" "$(free_port)" --no-event-store
run_server python-nostore "$url" other
start typescript "$NODE" "$NPM_DIR/ts_counter_server.mjs" 0
run_server typescript "$url" other

echo "connect: $passed passed, $failed failed"
[ "$failed" = 0 ]
