#!/usr/bin/env bash
# Usage: scripts/browser.sh [--only RUN[,RUN...]] [--no-build] [--help]
#
# A real browser against tidemark (CORS, both eras; docs/security.md "Browser clients (CORS)"). Headless
# Chromium (Debian's `chromium` package; apt-installed when missing, through sudo when not root)
# opens a page served by tests/browser/page_server.py from another origin than tidemark's. The
# page runs the official TypeScript MCP clients, bundled for the browser by esbuild (npm
# packages pinned in tests/browser/package-lock.json, installed into .cache/browser), and POSTs
# its verdict to the page server. tidemark runs as
#   target/release/tidemark --tools demo --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0
#       --allowed-origin http://127.0.0.1:<page port>
# Runs:
#   legacy            the page on the listed origin, @modelcontextprotocol/sdk 1.32.2 (Client +
#                     StreamableHTTPClientTransport): initialize (the session id must be readable),
#                     tools/list, echo {text}, slow_counter {steps:3} as an SSE call whose
#                     onprogress sees 3 notifications, then DELETE (terminateSession)
#   blocked-loopback  the same page at http://localhost:<page port>: a loopback origin, admitted
#                     by the DNS-rebinding rule but not listed, so no CORS headers (preflight 405)
#   blocked-foreign   the same page at http://evil.test:<page port> (Chromium maps the name to
#                     127.0.0.1): an unlisted origin, 403
#                     Each blocked run must fail at its first request with the browser's network
#                     error, Chromium's console must say "blocked by CORS policy", and tidemark
#                     must have created no session
#   modern            the page on the listed origin, @modelcontextprotocol/client 2.4.0 pinned to
#                     the 2026-07-28 revision (server/discover, stateless): echo and slow_counter
#                     with 3 progress notifications. Needs tidemark's modern-era path
#   auth-legacy, auth-modern  the legacy and modern runs against a second tidemark started
#                     with --auth-tokens (and the same --allowed-origin): the page's client sends
#                     `Authorization: Bearer …` (the SDKs' requestInit headers) and must succeed
#   auth-missing      the legacy page without a token against that server: its first request
#                     must get a 401 that JavaScript can read, WWW-Authenticate included
#   status            the admin listener's /status page (docs/status-page.md): two sessions, an
#                     owed stream (a slow_counter call whose client left), a misrouted session
#                     and a head over the header limit are made with curl; once /metrics stops
#                     changing, Chromium renders /status (--dump-dom) and every data-metric
#                     figure must equal its samples in a scrape of the same moment
#                     (tests/browser/status_check.py); its headers must be HTML, no-store and a
#                     CSP of default-src 'none'; left open with ?refresh=1 its NetLog must show
#                     it reloading itself and loading nothing else; after one more session a
#                     second load must show it, matching /metrics again
# After the runs: tidemark's counters must show every preflight answered and no requested
# header left out (tidemark_cors_headers_left_out_total 0).
#
#   --only RUNS   run only these (comma-separated: legacy,blocked-loopback,blocked-foreign,modern,
#                 status,auth-legacy,auth-modern,auth-missing)
#   --no-build    do not run cargo build --release (use the existing target/release/tidemark)
#
# Prints one PASS/FAIL line per run (with the page's failing step) and a final
# `browser: N passed, M failed`; logs and reports are in .cache/browser-results/. Exit 0 only
# when every run passed. tidemark, the page server and Chromium are stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PAGE_SRC="$ROOT/tests/browser"
BUNDLE_DIR="$CACHE/browser"
SITE="$BUNDLE_DIR/site"
RESULTS="$CACHE/browser-results"
ALL_RUNS="legacy,blocked-loopback,blocked-foreign,modern,status,auth-legacy,auth-modern,auth-missing"
# The token of the auth runs' tidemark (a test value in its --auth-tokens file).
BROWSER_TOKEN="browser-token-3d9f"
START_TIMEOUT_S=30
# The page gives up after 45 s (RUN_TIMEOUT_MS in page.mjs); this covers the browser's start.
RUN_TIMEOUT_S=75
# The name the blocked-foreign page is loaded from; Chromium resolves it to 127.0.0.1 itself.
FOREIGN_HOST="evil.test"
# The status run: how long its page stays open with ?refresh=1 (at least two reloads), and
# how long the gauges take to follow a change (two of the cores' REAP_INTERVAL, 250 ms).
STATUS_OPEN_S=6
GAUGE_SETTLE_S=0.6
# /status serves one rendering for up to a second (status::STATUS_RENDER_EVERY): a snapshot
# waits this long first, so the page it renders is made between its two scrapes.
STATUS_RENDER_EVERY_S=1.1

usage() { sed -n '2,50s/^# \{0,1\}//p' "$0"; }

only="$ALL_RUNS"
build=1
while [ "$#" -gt 0 ]; do
    case "$1" in
        --only) only="${2:?--only needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --help) usage; exit 0 ;;
        *) echo "browser.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
IFS=',' read -r -a runs <<<"$only"
for r in "${runs[@]}"; do
    case ",$ALL_RUNS," in
        *",$r,"*) ;;
        *) echo "browser.sh: unknown run '$r' (known: $ALL_RUNS)" >&2; exit 2 ;;
    esac
done

# ---- installs (idempotent) ----------------------------------------------------------------
# shellcheck source=SCRIPTDIR/apt-lib.sh
source "$ROOT/scripts/apt-lib.sh"
command -v chromium >/dev/null || apt_install browser.sh chromium
# shellcheck source=SCRIPTDIR/setup-node.sh
source "$ROOT/scripts/setup-node.sh"
SCRIPT_NAME=browser.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
npm_ci_pinned "$PAGE_SRC" "$BUNDLE_DIR" esbuild
# esbuild resolves the page's imports next to it, so the page is bundled from the install dir.
cp "$PAGE_SRC/page.mjs" "$BUNDLE_DIR/page.mjs"
mkdir -p "$SITE"
cp "$PAGE_SRC/index.html" "$SITE/index.html"
(cd "$BUNDLE_DIR" && node_modules/.bin/esbuild page.mjs --bundle --format=iife \
    --platform=browser --target=es2022 --log-level=warning --outfile="$SITE/bundle.js")
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi

# ---- processes ----------------------------------------------------------------------------
rm -rf "$RESULTS"
mkdir -p "$RESULTS/reports"
# shellcheck source=SCRIPTDIR/pids-lib.sh
source "$ROOT/scripts/pids-lib.sh"

python3 "$PAGE_SRC/page_server.py" --site "$SITE" --reports "$RESULTS/reports" \
    >"$RESULTS/page-server.stdout" 2>"$RESULTS/page-server.stderr" &
pids+=("$!")
page_url="$(wait_for_url "$RESULTS/page-server.stdout" "$!" "page server")"
page_port="${page_url#http://127.0.0.1:}"
page_port="${page_port%%/*}"
listed_origin="http://127.0.0.1:$page_port"

"$ROOT/target/release/tidemark" --tools demo --listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 --allowed-origin "$listed_origin" \
    >"$RESULTS/tidemark.stdout" 2>"$RESULTS/tidemark.stderr" &
tidemark_pid=$!
pids+=("$tidemark_pid")
# The banner's first URL is the endpoint's; the second, with --metrics-listen, the admin one.
# No `| head` here: with pipefail a reader that stops early can fail the assignment (SIGPIPE).
mcp_url="$(wait_for_url "$RESULTS/tidemark.stdout" "$tidemark_pid" tidemark)"
mcp_url="${mcp_url%%$'\n'*}"
metrics_url="$(head -n 1 "$RESULTS/tidemark.stdout" | grep -o 'metrics=http://[^ ]*' | cut -d= -f2)"
echo "browser: $(head -n 1 "$RESULTS/tidemark.stdout")"
echo "browser: page server $page_url, listed origin $listed_origin, $(chromium --version 2>/dev/null)"

# metric NAME: the value of one counter sample of tidemark's /metrics.
metric() {
    curl -fsS "$metrics_url" | awk -v name="$1" '$1 == name { print $2 }'
}

# open_page NAME ORIGIN ERA [EXPECT]: loads the page from ORIGIN in a fresh headless Chromium
# until the page reports (or RUN_TIMEOUT_S), then stops it. The report is
# RESULTS/reports/NAME.json, the browser's log (console included) RESULTS/NAME.chromium.log.
open_page() {
    local name="$1" origin="$2" era="$3" expect="${4:-}"
    local url="$origin/index.html?mcp=${PAGE_MCP_URL:-$mcp_url}&era=$era&run=$name&expect=$expect"
    url+="${PAGE_TOKEN:+&token=$PAGE_TOKEN}"
    # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start; the page is ours.
    chromium --headless --no-sandbox --disable-gpu --no-first-run \
        --enable-logging=stderr --v=0 --user-data-dir="$RESULTS/$name.profile" \
        --host-resolver-rules="MAP $FOREIGN_HOST 127.0.0.1" "$url" \
        >"$RESULTS/$name.chromium.log" 2>&1 &
    local browser_pid=$!
    pids+=("$browser_pid")
    local deadline=$((SECONDS + RUN_TIMEOUT_S))
    while [ ! -s "$RESULTS/reports/$name.json" ] && [ "$SECONDS" -lt "$deadline" ]; do
        kill -0 "$browser_pid" 2>/dev/null || break
        sleep 0.2
    done
    kill "$browser_pid" 2>/dev/null || true
    wait "$browser_pid" 2>/dev/null || true
}

# report_field NAME EXPR: a Python expression over the report `r` (e.g. r['ok']).
report_field() {
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(eval(sys.argv[2]))' "$RESULTS/reports/$1.json" "$2"
}

passed=0
failed=0
failed_names=()
pass() { passed=$((passed + 1)); echo "browser: PASS $1 ($2)"; }
fail() {
    failed=$((failed + 1))
    failed_names+=("$1")
    echo "browser: FAIL $1: $2"
}

# page_verdict NAME: checks the page's own verdict; prints the failing step on FAIL.
page_verdict() {
    local name="$1"
    if [ ! -s "$RESULTS/reports/$name.json" ]; then
        fail "$name" "no report within ${RUN_TIMEOUT_S}s; browser log tail:"
        tail -n 5 "$RESULTS/$name.chromium.log" | sed 's/^/    /'
        return 1
    fi
    if [ "$(report_field "$name" "r['ok']")" != True ]; then
        fail "$name" "$(report_field "$name" "r.get('error')")"
        report_field "$name" "[s['name'] for s in r['steps'] if s['ok']]" | sed 's/^/    steps passed: /'
        report_field "$name" "r['exchanges']" | sed 's/^/    exchanges: /'
        return 1
    fi
}

run_listed() {
    local name="$1" era="$2"
    open_page "$name" "$listed_origin" "$era"
    if page_verdict "$name"; then
        pass "$name" "$(report_field "$name" "'; '.join(s['name'] + ' ok' for s in r['steps'])")"
    fi
}

run_blocked() {
    local name="$1" origin="$2" sessions_before sessions_after
    sessions_before="$(metric tidemark_sessions_created_total)"
    open_page "$name" "$origin" legacy blocked
    sessions_after="$(metric tidemark_sessions_created_total)"
    page_verdict "$name" || return 0
    if ! grep -q 'blocked by CORS policy' "$RESULTS/$name.chromium.log"; then
        fail "$name" "the page failed, but Chromium's console names no CORS block"
    elif [ "$sessions_after" != "$sessions_before" ]; then
        fail "$name" "tidemark created a session ($sessions_before -> $sessions_after)"
    else
        pass "$name" "origin $origin: $(grep -m 1 -o 'Response to preflight request[^"]*' \
            "$RESULTS/$name.chromium.log")"
    fi
}

want_run() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

if want_run legacy; then run_listed legacy legacy; fi
if want_run blocked-loopback; then run_blocked blocked-loopback "http://localhost:$page_port"; fi
if want_run blocked-foreign; then run_blocked blocked-foreign "http://$FOREIGN_HOST:$page_port"; fi
if want_run modern; then
    run_listed modern modern
    # Tell a CORS fault from a missing era: a status JavaScript could read passed CORS.
    if [[ " ${failed_names[*]} " == *" modern "* ]] \
        && [ "$(report_field modern "(r['exchanges'] or [{}])[0].get('status')")" = 400 ]; then
        echo "    hint: the server/discover probe passed CORS and got a readable 400 (tidemark's" \
            "answer to a revision it does not serve): this build has no 2026-07-28 path"
    fi
fi

# ---- the status run ---------------------------------------------------------------------
# Chromium without its own background traffic, so the NetLog shows what the page loaded.
status_chromium=(chromium --headless --no-sandbox --disable-gpu --no-first-run
    --disable-background-networking --disable-component-update --disable-sync
    --disable-default-apps --disable-extensions)
LEGACY_HEADERS=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')

# open_session: initializes a 2025-era session with curl; prints its id.
open_session() {
    curl -fsS -D - -o /dev/null "${LEGACY_HEADERS[@]}" "$mcp_url" -d \
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"browser.sh","version":"1"}}}' \
        | tr -d '\r' | awk 'tolower($1) == "mcp-session-id:" { print $2 }'
}

# status_snapshot NAME: /status rendered by Chromium into RESULTS/NAME.html and a /metrics
# scrape of the same moment into RESULTS/NAME.metrics: scraped before and after the render
# until both agree (the server state did not move meanwhile; three tries).
status_snapshot() {
    local name="$1" try
    for try in 1 2 3; do
        sleep "$STATUS_RENDER_EVERY_S"
        curl -fsS "$metrics_url" >"$RESULTS/$name.before"
        "${status_chromium[@]}" --user-data-dir="$RESULTS/$name.profile" --dump-dom \
            "$status_url" >"$RESULTS/$name.html" 2>"$RESULTS/$name.chromium.log" || true
        curl -fsS "$metrics_url" >"$RESULTS/$name.metrics"
        cmp -s "$RESULTS/$name.before" "$RESULTS/$name.metrics" && return 0
        sleep "$GAUGE_SETTLE_S"
    done
    return 1
}

run_status() {
    status_url="${metrics_url%/metrics}/status"
    local headers verdict sid sessions
    headers="$(curl -fsS -D - -o /dev/null "$status_url" | tr -d '\r')"
    if ! grep -qix 'content-type: text/html; charset=utf-8' <<<"$headers" \
        || ! grep -qix 'cache-control: no-store' <<<"$headers" \
        || ! grep -qi "^content-security-policy: default-src 'none'; style-src 'unsafe-inline'" <<<"$headers"; then
        fail status "headers of $status_url:"$'\n'"$headers"
        return 0
    fi
    # The state to show: two sessions, an owed stream, a misrouted session, a header limit hit.
    sid="$(open_session)"
    open_session >/dev/null
    curl -s -o /dev/null --max-time 0.3 "${LEGACY_HEADERS[@]}" -H "Mcp-Session-Id: $sid" \
        -H 'MCP-Protocol-Version: 2025-11-25' "$mcp_url" -d \
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_counter","arguments":{"steps":3,"delay_ms":200}}}' \
        || true
    curl -sS -o /dev/null "${LEGACY_HEADERS[@]}" -H "Mcp-Session-Id: ff${sid:2}" \
        -H 'MCP-Protocol-Version: 2025-11-25' "$mcp_url" -d '{"jsonrpc":"2.0","id":2,"method":"ping"}'
    curl -sS -o /dev/null -H "X-Padding: $(head -c 20000 /dev/zero | tr '\0' a)" "$mcp_url" || true
    sleep 1 # the call's 3 × 200 ms, then the reaper's sample
    if ! status_snapshot status-first; then
        fail status "/metrics kept changing while /status was rendered"
        return 0
    fi
    if ! verdict="$(python3 "$PAGE_SRC/status_check.py" figures "$RESULTS/status-first.html" \
        "$RESULTS/status-first.metrics" --want 'tidemark_sessions_active>=2' \
        --want 'tidemark_streams_owed>=1' --want 'tidemark_ring_bytes>=1' \
        --want 'tidemark_misrouted_total{name="session"}>=1' \
        --want 'tidemark_limit_hits_total{limit="header"}>=1')"; then
        fail status "first load: $verdict"
        return 0
    fi
    sessions="$(metric tidemark_sessions_active)"
    # Left open, the page reloads itself, and loads nothing but itself.
    "${status_chromium[@]}" --user-data-dir="$RESULTS/status-open.profile" \
        --enable-logging=stderr --v=0 --log-net-log="$RESULTS/status-open.netlog.json" \
        "$status_url?refresh=1" >"$RESULTS/status-open.chromium.log" 2>&1 &
    local browser_pid=$!
    pids+=("$browser_pid")
    sleep "$STATUS_OPEN_S"
    kill "$browser_pid" 2>/dev/null || true
    wait "$browser_pid" 2>/dev/null || true
    local loads
    if ! loads="$(python3 "$PAGE_SRC/status_check.py" netlog "$RESULTS/status-open.netlog.json" \
        "$status_url?refresh=1" --min-loads 2)"; then
        fail status "left open: $loads"
        return 0
    fi
    if grep -q 'Content Security Policy' "$RESULTS/status-open.chromium.log"; then
        fail status "the page broke its CSP: $(grep -m 1 'Content Security Policy' "$RESULTS/status-open.chromium.log")"
        return 0
    fi
    # A new session shows on the next load.
    open_session >/dev/null
    sleep "$GAUGE_SETTLE_S"
    local second
    if ! status_snapshot status-second; then
        fail status "/metrics kept changing while /status was rendered (second load)"
    elif ! second="$(python3 "$PAGE_SRC/status_check.py" figures "$RESULTS/status-second.html" \
        "$RESULTS/status-second.metrics" --want "tidemark_sessions_active>=$((sessions + 1))")"; then
        fail status "second load: $second"
    else
        pass status "$verdict; $loads; second load: $second"
    fi
}

if want_run status; then run_status; fi

# The auth runs: one more tidemark, with a token file, on the same listed origin.
if want_run auth-legacy || want_run auth-modern || want_run auth-missing; then
    printf '# browser.sh test token\n%s browser\n' "$BROWSER_TOKEN" >"$RESULTS/tokens"
    chmod 600 "$RESULTS/tokens"
    "$ROOT/target/release/tidemark" --tools demo --listen 127.0.0.1:0 \
        --allowed-origin "$listed_origin" --auth-tokens "$RESULTS/tokens" \
        >"$RESULTS/tidemark-auth.stdout" 2>"$RESULTS/tidemark-auth.stderr" &
    auth_pid=$!
    pids+=("$auth_pid")
    auth_url="$(wait_for_url "$RESULTS/tidemark-auth.stdout" "$auth_pid" "tidemark --auth-tokens")"
    auth_url="${auth_url%%$'\n'*}"
    echo "browser: with a token: $(head -n 1 "$RESULTS/tidemark-auth.stdout")"
    if want_run auth-legacy; then PAGE_MCP_URL="$auth_url" PAGE_TOKEN="$BROWSER_TOKEN" run_listed auth-legacy legacy; fi
    if want_run auth-modern; then PAGE_MCP_URL="$auth_url" PAGE_TOKEN="$BROWSER_TOKEN" run_listed auth-modern modern; fi
    if want_run auth-missing; then
        PAGE_MCP_URL="$auth_url" open_page auth-missing "$listed_origin" legacy unauthorized
        if page_verdict auth-missing; then
            pass auth-missing "$(report_field auth-missing "'401 readable, WWW-Authenticate: ' + r['exchanges'][0]['challenge']")"
        fi
    fi
    if ! kill -0 "$auth_pid" 2>/dev/null; then
        fail tidemark-auth "the server died; stderr tail:"
        tail -n 20 "$RESULTS/tidemark-auth.stderr" | sed 's/^/    /'
    fi
fi

preflights="$(metric tidemark_cors_preflights_total)"
left_out="$(metric tidemark_cors_headers_left_out_total)"
if [ "$left_out" = 0 ] && { [ "$preflights" -gt 0 ] || ! want_run legacy; }; then
    pass counters "tidemark_cors_preflights_total $preflights, tidemark_cors_headers_left_out_total 0"
else
    fail counters "tidemark_cors_preflights_total $preflights, tidemark_cors_headers_left_out_total $left_out"
fi
if ! kill -0 "$tidemark_pid" 2>/dev/null; then
    fail tidemark "the server died; stderr tail:"
    tail -n 20 "$RESULTS/tidemark.stderr" | sed 's/^/    /'
fi

if [ "$failed" -gt 0 ]; then
    echo "browser: failed: ${failed_names[*]}"
fi
echo "browser: $passed passed, $failed failed"
[ "$failed" = 0 ]
